//! Charts as SVG and PNG (plotters): line charts of series and horizontal bar charts of
//! per-group values. Every chart is written twice from the same drawing code, once per backend.
//!
//! Text in PNGs needs a font: DejaVu Sans Mono (`experiments/fonts/`, Bitstream Vera licence)
//! is compiled into the binary and registered as "sans-serif", so no system font or network is
//! needed. SVGs carry their text as `<text>` elements.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::error::{CompareError, Result};

const FONT: &[u8] = include_bytes!("../../experiments/fonts/DejaVuSansMono.ttf");
static FONT_ONCE: Once = Once::new();

fn register_font() {
    FONT_ONCE.call_once(|| {
        // The font is a valid TTF committed with the source; a failure would only lose PNG text.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// One line of a line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// A horizontal bar chart: one bar per row, coloured by its `colour_key` (legend).
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub x_label: String,
    /// `(row label, colour key, value)`; rows with no value get no bar.
    pub rows: Vec<(String, String, Option<f64>)>,
}

fn plot_err(path: &Path) -> impl Fn(String) -> CompareError + '_ {
    move |why| CompareError::Plot { path: path.to_path_buf(), why }
}

fn range_of(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    if lo > hi {
        return None;
    }
    let pad = if hi > lo { 0.05 * (hi - lo) } else { lo.abs().max(1.0) * 0.05 };
    Some((lo - pad, hi + pad))
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &LineChart) -> std::result::Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    root.fill(&WHITE).map_err(e)?;
    let (x0, x1) = range_of(c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0))).unwrap_or((0.0, 1.0));
    let (y0, y1) = range_of(c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1))).unwrap_or((0.0, 1.0));
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    chart.configure_mesh().x_desc(&c.x_label).y_desc(&c.y_label).label_style(("sans-serif", 12)).draw().map_err(e)?;
    for (i, s) in c.series.iter().enumerate() {
        let colour = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
        chart
            .draw_series(LineSeries::new(pts, colour.stroke_width(2)))
            .map_err(e)?
            .label(&s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
    }
    if !c.series.is_empty() {
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 11))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(e)?;
    }
    root.present().map_err(e)
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart) -> std::result::Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    root.fill(&WHITE).map_err(e)?;
    let n = c.rows.len().max(1);
    let hi = c.rows.iter().filter_map(|r| r.2).filter(|v| v.is_finite()).fold(0.0f64, f64::max);
    let hi = if hi > 0.0 { hi * 1.1 } else { 1.0 };
    let label_width = c.rows.iter().map(|r| r.0.len()).max().unwrap_or(4) as u32 * 7 + 12;
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(label_width)
        .build_cartesian_2d(0.0..hi, -0.5..(n as f64 - 0.5))
        .map_err(e)?;
    let labels: Vec<String> = c.rows.iter().map(|r| r.0.clone()).collect();
    let fmt = move |y: &f64| {
        let i = y.round();
        if (y - i).abs() < 1e-6 && i >= 0.0 { labels.get(i as usize).cloned().unwrap_or_default() } else { String::new() }
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&fmt)
        .x_desc(&c.x_label)
        .label_style(("sans-serif", 11))
        .draw()
        .map_err(e)?;
    let mut keys: Vec<String> = Vec::new();
    for r in &c.rows {
        if !keys.contains(&r.1) {
            keys.push(r.1.clone());
        }
    }
    for (k, key) in keys.iter().enumerate() {
        let colour = Palette99::pick(k).to_rgba();
        let bars: Vec<Rectangle<(f64, f64)>> = c
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| &r.1 == key)
            .filter_map(|(i, r)| r.2.filter(|v| v.is_finite()).map(|v| Rectangle::new([(0.0, i as f64 - 0.35), (v, i as f64 + 0.35)], colour.filled())))
            .collect();
        chart.draw_series(bars).map_err(e)?.label(key).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 11))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

/// Write `stem.svg` and `stem.png`; returns the two paths.
fn write_both(stem: &Path, size: (u32, u32), draw_svg: impl Fn(&DrawingArea<SVGBackend, Shift>) -> std::result::Result<(), String>, draw_png: impl Fn(&DrawingArea<BitMapBackend, Shift>) -> std::result::Result<(), String>) -> Result<(PathBuf, PathBuf)> {
    register_font();
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw_svg(&root).map_err(plot_err(&svg))?;
    }
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        draw_png(&root).map_err(plot_err(&png))?;
    }
    Ok((svg, png))
}

/// Draw a line chart to `stem.svg` and `stem.png`.
pub fn line_chart(stem: &Path, c: &LineChart) -> Result<(PathBuf, PathBuf)> {
    write_both(stem, (900, 540), |r| draw_lines(r, c), |r| draw_lines(r, c))
}

/// Draw a bar chart to `stem.svg` and `stem.png` (height grows with the rows).
pub fn bar_chart(stem: &Path, c: &BarChart) -> Result<(PathBuf, PathBuf)> {
    let h = 140 + 20 * c.rows.len() as u32;
    write_both(stem, (900, h.max(240)), |r| draw_bars(r, c), |r| draw_bars(r, c))
}
