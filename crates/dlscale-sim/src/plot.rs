//! Line charts as SVG and PNG (plotters, with a bundled DejaVu Sans Mono font so text renders
//! without system fonts).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::error::{Result, SimError};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
const FAMILY: &str = "dlscale-sans";
const SIZE_PX: (u32, u32) = (900, 560);

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// The lines.
    pub series: &'a [Series],
    /// Draw markers at every point (for sweeps with few points).
    pub markers: bool,
}

fn font_registered() -> std::result::Result<(), String> {
    static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FAMILY, FontStyle::Normal, FONT)
                .map_err(|_| "the bundled font does not parse".to_string())
        })
        .clone()
}

/// Draws `chart` into `<stem>.svg` and `<stem>.png`; returns both paths.
pub fn line_chart(stem: &Path, chart: &Chart) -> Result<[PathBuf; 2]> {
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let fail = |path: &Path, reason: String| SimError::Plot {
        path: path.display().to_string(),
        reason,
    };
    font_registered().map_err(|e| fail(stem, e))?;
    {
        let root = SVGBackend::new(&svg, SIZE_PX).into_drawing_area();
        draw(&root, chart).map_err(|e| fail(&svg, e))?;
        root.present().map_err(|e| fail(&svg, e.to_string()))?;
    }
    {
        let root = BitMapBackend::new(&png, SIZE_PX).into_drawing_area();
        draw(&root, chart).map_err(|e| fail(&png, e))?;
        root.present().map_err(|e| fail(&png, e.to_string()))?;
    }
    Ok([svg, png])
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
) -> std::result::Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let points = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, 0.0f64, f64::NEG_INFINITY);
    for &(x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y1) = (0.0, 1.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let font = |size: u32| (FAMILY, size).into_font();
    let mut ctx = ChartBuilder::on(root)
        .caption(chart.title, font(22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1 * 1.05)
        .map_err(err)?;
    ctx.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style(font(14))
        .axis_desc_style(font(16))
        .draw()
        .map_err(err)?;
    for (k, s) in chart.series.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let style = ShapeStyle::from(color).stroke_width(2);
        ctx.draw_series(LineSeries::new(s.points.iter().copied(), style))
            .map_err(err)?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if chart.markers {
            ctx.draw_series(
                s.points
                    .iter()
                    .map(|&p| Circle::new(p, 4, ShapeStyle::from(color).filled())),
            )
            .map_err(err)?;
        }
    }
    ctx.configure_series_labels()
        .label_font(font(14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_with_text_and_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let series = [Series {
            label: "elastic-batch".into(),
            points: vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)],
        }];
        let [svg, png] = line_chart(
            &dir.path().join("chart"),
            &Chart {
                title: "JCT CDF",
                x_label: "JCT (s)",
                y_label: "fraction",
                series: &series,
                markers: true,
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(svg).unwrap();
        assert!(
            text.contains("<svg") && text.contains("JCT CDF") && text.contains("elastic-batch")
        );
        let bytes = std::fs::read(png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(
            bytes.len() > 5_000,
            "a drawn 900×560 chart, got {} bytes",
            bytes.len()
        );
    }
}
