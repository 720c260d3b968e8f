"""Peer normalization kernels timed on a lent GPU, for the ratios in kernels/README.md.

Runs on the device machine (kernels/device/lease.sh calls it), where PyTorch and Triton are
installed; Liger-Kernel travels as a wheel (pure Python + Triton). Measures, on the shape of
`normlab bench --device cuda` ([16384 x 4096], bf16 and fp16):

- the device copy bandwidth through PyTorch (`dst.copy_(src)` over 512 MiB, bytes read + written),
- PyTorch's own `F.rms_norm` and `F.layer_norm` (no affine), forward and backward (dx only),
- Liger-Kernel's `LigerRMSNorm` and `LigerLayerNorm` (affine: their modules always have a weight,
  so their backward also reduces dW; the weight's 8 KiB are not counted),

each the median of `triton.testing.do_bench` (CUDA events, L2 flushed before every rep), with
compulsory bytes counted as normlab counts them: forward x read + y written (4 B/element),
backward x, dy read + dx written (6 B/element). Writes JSON to argv[1] and prints a table.
Every output is checked against an fp32 reference computed by PyTorch on the same input, so a
peer that computed something else is reported as such, not timed as if it were right.
"""

import json
import sys

import torch
import torch.nn.functional as F
import triton

ROWS, N = 16384, 4096
EPS = 1e-5


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median") * 1e-3


def copy_gbs():
    src = torch.randn(256 << 20, device="cuda", dtype=torch.float16)  # 512 MiB
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src))
    assert torch.equal(src[:4096], dst[:4096])
    return 2 * src.numel() * 2 / t / 1e9


def reference(kind, x):
    xf = x.float()
    if kind == "rms":
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    mu = xf.mean(-1, keepdim=True)
    return (xf - mu) * torch.rsqrt((xf - mu).pow(2).mean(-1, keepdim=True) + EPS)


def peers(dtype):
    out = [("torch F.rms_norm", "rms", lambda x: F.rms_norm(x, (N,), eps=EPS), False), ("torch F.layer_norm", "layer", lambda x: F.layer_norm(x, (N,), eps=EPS), False)]
    try:
        from liger_kernel.transformers import LigerLayerNorm, LigerRMSNorm

        rms = LigerRMSNorm(N, eps=EPS).cuda().to(dtype)
        ln = LigerLayerNorm(N, eps=EPS).cuda().to(dtype)
        out += [("liger LigerRMSNorm", "rms", rms, True), ("liger LigerLayerNorm", "layer", ln, True)]
    except Exception as e:  # reported, not hidden
        print(f"liger-kernel unavailable: {e!r}", file=sys.stderr)
    return out


def main():
    torch.manual_seed(0)
    rep = {"torch": torch.__version__, "triton": triton.__version__, "device": torch.cuda.get_device_name(), "shape": [ROWS, N], "cases": []}
    try:
        import liger_kernel

        rep["liger_kernel"] = getattr(liger_kernel, "__version__", "0.8.5 (wheel)")
    except Exception:
        rep["liger_kernel"] = None
    rep["copy_gb_per_s"] = copy_gbs()
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(ROWS, N, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn(ROWS, N, device="cuda", dtype=dtype)
        for name, kind, fn, affine in peers(dtype):
            y = fn(x)
            ref = reference(kind, x.detach())
            err = ((y.float() - ref).norm() / ref.norm()).item()
            del ref
            tf = bench(lambda: fn(x))
            tb = bench(lambda: torch.autograd.grad(y, x, dy, retain_graph=True))
            for d, t, b in (("forward", tf, 4), ("backward", tb, 6)):
                gbs = b * ROWS * N / t / 1e9
                rep["cases"].append({"peer": name, "kind": kind, "dtype": str(dtype).split(".")[-1], "direction": d, "affine": affine, "median_s": t, "gb_per_s": gbs, "fraction_of_copy": gbs / rep["copy_gb_per_s"], "rel_err_vs_fp32": err})
            del y
    with open(sys.argv[1], "w") as f:
        json.dump(rep, f, indent=1)
    print(f"peers on {rep['device']}: torch {rep['torch']}, triton {rep['triton']}, liger {rep['liger_kernel']}; torch copy {rep['copy_gb_per_s']:.0f} GB/s")
    for c in rep["cases"]:
        print(f"{c['peer']:22} {c['dtype']:9} {c['direction']:9} {c['median_s']*1e6:8.1f} us {c['gb_per_s']:7.0f} GB/s {c['fraction_of_copy']:6.3f} of copy  rel err {c['rel_err_vs_fp32']:.1e}")


if __name__ == "__main__":
    main()
