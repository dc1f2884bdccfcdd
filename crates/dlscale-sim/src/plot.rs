//! Line charts as SVG and PNG (plotters, with a bundled DejaVu Sans Mono font so text renders
//! without system fonts).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use crate::error::{Result, SimError};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
const FAMILY: &str = "dlscale-sans";
/// The plot's own size; the legend is drawn to its right, in a strip as wide as its labels.
const PLOT_PX: (u32, u32) = (900, 560);
/// Room around a log axis's outermost points, as a factor, so that their markers are whole.
const LOG_PAD: f64 = 1.15;
/// Where the legend's first entry sits, and the height of each entry, px.
const LEGEND_TOP_PX: i32 = 56;
const LEGEND_ROW_PX: i32 = 22;
/// The legend's sample line, and the gaps around its labels, px.
const LEGEND_LINE_PX: i32 = 24;
const LEGEND_GAP_PX: i32 = 8;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// `(x, y)` points, drawn in order. A point whose y is not finite is a gap: the line breaks
    /// there (a value that does not exist, such as a mean over nothing).
    pub points: Vec<(f64, f64)>,
}

/// How the x axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// Equal differences are equal distances.
    Linear,
    /// Equal ratios are equal distances, with ticks at powers of two (for sweeps that double);
    /// every x must be positive.
    Log,
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
    /// How the x axis maps values.
    pub x_axis: Axis,
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

fn font(size: u32) -> FontDesc<'static> {
    (FAMILY, size).into_font()
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
    let size = (
        PLOT_PX.0 + legend_width(chart).map_err(|e| fail(stem, e))?,
        PLOT_PX.1,
    );
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw(&root, chart).map_err(|e| fail(&svg, e))?;
        root.present().map_err(|e| fail(&svg, e.to_string()))?;
    }
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        draw(&root, chart).map_err(|e| fail(&png, e))?;
        root.present().map_err(|e| fail(&png, e.to_string()))?;
    }
    Ok([svg, png])
}

/// The width of the legend's strip: its sample lines and its longest label.
fn legend_width(chart: &Chart) -> std::result::Result<u32, String> {
    let mut widest = 0;
    for s in chart.series {
        let (w, _) = font(14)
            .box_size(&s.label)
            .map_err(|e| format!("cannot measure the label '{}': {e:?}", s.label))?;
        widest = widest.max(w);
    }
    Ok(widest + (LEGEND_LINE_PX + 3 * LEGEND_GAP_PX) as u32)
}

/// The runs of a series' points between gaps (points whose y is not finite).
fn segments(points: &[(f64, f64)]) -> impl Iterator<Item = &[(f64, f64)]> {
    points
        .split(|(_, y)| !y.is_finite())
        .filter(|run| !run.is_empty())
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
) -> std::result::Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let (plot_area, legend_area) = root.split_horizontally(PLOT_PX.0);
    let log = chart.x_axis == Axis::Log;
    let points = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, 0.0f64, f64::NEG_INFINITY);
    for &(x, y) in points.filter(|(x, y)| x.is_finite() && y.is_finite()) {
        if log && x <= 0.0 {
            return Err(format!(
                "the x axis is logarithmic, and '{}' has x = {x}: every x must be positive",
                chart.x_label
            ));
        }
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y1) = (1.0, 2.0, 1.0);
    }
    if x1 <= x0 {
        x1 = if log { x0 * 2.0 } else { x0 + 1.0 };
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    let mut builder = ChartBuilder::on(&plot_area);
    builder
        .caption(chart.title, font(22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72);
    let ys = y0..y1 * 1.05;
    match chart.x_axis {
        Axis::Linear => plot(
            builder.build_cartesian_2d(x0..x1, ys).map_err(err)?,
            chart,
            None,
        )?,
        Axis::Log => plot(
            builder
                .build_cartesian_2d((x0 / LOG_PAD..x1 * LOG_PAD).log_scale().base(2.0), ys)
                .map_err(err)?,
            chart,
            Some(&|x: &f64| format!("{x}")),
        )?,
    }
    legend(&legend_area, chart)
}

/// Draws the axes and the lines of `chart` into `ctx`, its x labels written by `x_format`
/// (the axis's own format when `None`).
fn plot<DB, X>(
    mut ctx: ChartContext<'_, DB, Cartesian2d<X, RangedCoordf64>>,
    chart: &Chart,
    x_format: Option<&dyn Fn(&f64) -> String>,
) -> std::result::Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut mesh = ctx.configure_mesh();
    mesh.x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .label_style(font(14))
        .axis_desc_style(font(16));
    if let Some(format) = x_format {
        mesh.x_label_formatter(format);
    }
    mesh.draw().map_err(err)?;
    for (k, s) in chart.series.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let style = ShapeStyle::from(color).stroke_width(2);
        ctx.draw_series(
            segments(&s.points)
                .filter(|run| run.len() > 1)
                .map(|run| PathElement::new(run.to_vec(), style)),
        )
        .map_err(err)?;
        // A value between two gaps: a dot as wide as the line.
        ctx.draw_series(
            segments(&s.points)
                .filter(|run| run.len() == 1)
                .map(|run| Circle::new(run[0], 2, style.filled())),
        )
        .map_err(err)?;
        if chart.markers {
            ctx.draw_series(
                segments(&s.points)
                    .flatten()
                    .map(|&p| Circle::new(p, 4, ShapeStyle::from(color).filled())),
            )
            .map_err(err)?;
        }
    }
    Ok(())
}

/// The legend: each series' line (and marker) and label, one under the other, in the strip to
/// the right of the plot, where it covers no data.
fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
) -> std::result::Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for (k, s) in chart.series.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let y = LEGEND_TOP_PX + LEGEND_ROW_PX * k as i32;
        let (x0, x1) = (LEGEND_GAP_PX, LEGEND_GAP_PX + LEGEND_LINE_PX);
        area.draw(&PathElement::new(
            vec![(x0, y), (x1, y)],
            ShapeStyle::from(color).stroke_width(2),
        ))
        .map_err(err)?;
        if chart.markers {
            area.draw(&Circle::new(
                ((x0 + x1) / 2, y),
                4,
                ShapeStyle::from(color).filled(),
            ))
            .map_err(err)?;
        }
        area.draw(&Text::new(
            s.label.as_str(),
            (x1 + LEGEND_GAP_PX, y),
            TextStyle::from(font(14)).pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of attribute `name` in an SVG element's text.
    fn attribute(element: &str, name: &str) -> Option<f64> {
        let start = element.find(&format!(" {name}=\""))? + name.len() + 3;
        element[start..].split('"').next()?.parse().ok()
    }

    /// The SVG's elements of kind `tag` (`<circle`, `<polyline`, `<text`), as text.
    fn elements<'a>(svg: &'a str, tag: &str) -> Vec<&'a str> {
        svg.split(tag)
            .skip(1)
            .map(|rest| rest.split('>').next().unwrap_or_default())
            .collect()
    }

    fn draw_svg(chart: &Chart) -> String {
        let dir = tempfile::tempdir().unwrap();
        let [svg, _] = line_chart(&dir.path().join("chart"), chart).unwrap();
        std::fs::read_to_string(svg).unwrap()
    }

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
                x_axis: Axis::Linear,
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
            "a drawn chart, got {} bytes",
            bytes.len()
        );
    }

    #[test]
    fn a_log_axis_spaces_doublings_evenly_and_the_legend_covers_no_data() {
        let rates = [2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
        let series: Vec<Series> = ["elastic-batch", "a label long enough to need room"]
            .iter()
            .enumerate()
            .map(|(k, label)| Series {
                label: label.to_string(),
                // The top left and the top right corners hold data too.
                points: rates.iter().map(|&r| (r, 100.0 - k as f64)).collect(),
            })
            .collect();
        let svg = draw_svg(&Chart {
            title: "jobs completed",
            x_label: "arrival rate (jobs/h)",
            y_label: "jobs",
            x_axis: Axis::Log,
            series: &series,
            markers: true,
        });
        let circles: Vec<(f64, f64)> = elements(&svg, "<circle")
            .iter()
            .filter_map(|c| Some((attribute(c, "cx")?, attribute(c, "r")?)))
            .collect();
        let legend_x = f64::from(PLOT_PX.0);
        let data: Vec<f64> = circles
            .iter()
            .filter(|&&(x, _)| x < legend_x)
            .map(|&(x, _)| x)
            .collect();
        assert_eq!(data.len(), 12, "{circles:?}");
        let steps: Vec<f64> = data[..6].windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps[0] > 50.0, "{steps:?}");
        assert!(
            steps.iter().all(|s| (s - steps[0]).abs() <= 1.0),
            "each doubling the same distance: {steps:?}"
        );
        // The ticks are the doublings themselves.
        // Each text's x and content.
        let texts: Vec<(f64, &str)> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| {
                let (head, rest) = t.split_once('>')?;
                Some((attribute(head, "x")?, rest.split('<').next()?.trim()))
            })
            .collect();
        for tick in ["2", "4", "8", "16", "32", "64"] {
            assert!(
                texts.iter().any(|t| t.1 == tick),
                "no tick {tick}: {texts:?}"
            );
        }
        // The legend: right of the plot, each label and its marker.
        for s in &series {
            let x = texts.iter().find(|t| t.1 == s.label).map(|t| t.0);
            assert!(x.is_some_and(|x| x > legend_x), "{x:?}: {texts:?}");
        }
        assert_eq!(circles.len() - data.len(), 2, "one legend marker a series");
    }

    #[test]
    fn a_gap_breaks_the_line_and_a_log_axis_refuses_what_it_cannot_show() {
        let series = [Series {
            label: "mean GPUs per running job".into(),
            points: vec![
                (0.0, f64::NAN),
                (1.0, 2.0),
                (2.0, f64::NAN),
                (3.0, 1.0),
                (4.0, 3.0),
                (5.0, f64::NAN),
            ],
        }];
        let chart = Chart {
            title: "GPUs per running job",
            x_label: "time (h)",
            y_label: "GPUs",
            x_axis: Axis::Linear,
            series: &series,
            markers: false,
        };
        let svg = draw_svg(&chart);
        let RGBAColor(r, g, b, _) = Palette99::pick(0).to_rgba();
        let stroke = format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"");
        // The series' lines in the plot (the legend's sample is right of it).
        let lines: Vec<Vec<f64>> = elements(&svg, "<polyline")
            .into_iter()
            .filter(|l| l.contains(&stroke))
            .map(|l| {
                let points = l.split("points=\"").nth(1).unwrap_or_default();
                points
                    .split_whitespace()
                    .filter_map(|p| p.split(',').next()?.parse().ok())
                    .collect()
            })
            .filter(|xs: &Vec<f64>| xs.first().is_some_and(|&x| x < f64::from(PLOT_PX.0)))
            .collect();
        // One line of two points (3 and 4), one dot for the value between gaps (1); nothing
        // at the gaps.
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0].len(), 2, "{lines:?}");
        let dots = elements(&svg, "<circle");
        assert_eq!(dots.len(), 1, "{dots:?}");
        assert_eq!(attribute(dots[0], "r"), Some(2.0));

        let negative = [Series {
            label: "bad".into(),
            points: vec![(0.0, 1.0), (2.0, 1.0)],
        }];
        let dir = tempfile::tempdir().unwrap();
        let e = line_chart(
            &dir.path().join("log"),
            &Chart {
                x_axis: Axis::Log,
                series: &negative,
                ..chart
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("every x must be positive"), "{e}");
    }
}
