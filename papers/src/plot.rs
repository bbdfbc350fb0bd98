//! SVG line plots (plotters, SVG backend only: no font files needed, the text is left to
//! the viewer). Every series gets its own colour *and* marker, seed spread is drawn as
//! error bars, the paper's values as hollow markers or dotted lines, the legend sits
//! beside the plot (never over a curve), and an axis whose ticks are whole numbers
//! prints them as such. [`Plot::layout`] computes all of that without drawing, so that
//! a test can check it for every committed plot.

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// One curve.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Series {
    /// Legend entry.
    pub label: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
    /// Dashed (for a second family of lines, e.g. the CLT twin of a run).
    pub dashed: bool,
    /// Half-widths of the seed spread per point (± one sd), empty when one seed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<f64>,
}

/// A value the paper reports, drawn in the colour of `series` (when given) as a hollow
/// marker at `x`, or across the plot as a dotted line when `x` is `None`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reference {
    /// Legend entry.
    pub label: String,
    /// Where along x (`None`: a horizontal line).
    pub x: Option<f64>,
    /// The value.
    pub y: f64,
    /// The index of the series it belongs to.
    pub series: Option<usize>,
}

/// Colour-blind-safe qualitative palette (Tableau 10).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Point markers, cycled independently of the colours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// ●
    Circle,
    /// ▲
    Triangle,
    /// ■
    Square,
    /// ✕
    Cross,
    /// ◆
    Diamond,
    /// ▼
    Down,
}

const MARKERS: [Marker; 6] = [
    Marker::Circle,
    Marker::Triangle,
    Marker::Square,
    Marker::Cross,
    Marker::Diamond,
    Marker::Down,
];

/// The look of one series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Index into the palette.
    pub colour: usize,
    /// Marker.
    pub marker: Marker,
    /// Dashed line.
    pub dashed: bool,
}

/// Most series one plot takes: beyond it two series would share a colour and a marker.
pub const MAX_SERIES: usize = 30;

/// Ranges and styles of a plot, decided before drawing.
#[derive(Clone, Debug)]
pub struct Layout {
    /// x range.
    pub x: (f64, f64),
    /// y range.
    pub y: (f64, f64),
    /// One style per series.
    pub styles: Vec<Style>,
    /// Whether every x / y tick may print as a whole number.
    pub integer_x: bool,
    /// Same for y.
    pub integer_y: bool,
}

/// A plot to write; [`write`](Plot::write) saves it beside the SVG as
/// `<name>.plot.json`, from which the plot can be drawn again.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Plot {
    /// Title (dataset, model and δ where they apply).
    pub title: String,
    /// x axis title.
    pub x_label: String,
    /// y axis title.
    pub y_label: String,
    /// The curves.
    pub series: Vec<Series>,
    /// The paper's values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<Reference>,
    /// Fit y to the points in the last fraction of each series' x range only (e.g. 0.75:
    /// ignore the first quarter's climb, where per-epoch accuracies start far below the
    /// differences that matter); `None`: all points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus_tail: Option<f64>,
}

fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// A range padded by 5% of its width on each side (at least 1e-3), or widened to ±0.5
/// around a single value.
pub fn padded((lo, hi): (f64, f64)) -> (f64, f64) {
    if hi <= lo {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = ((hi - lo) * 0.05).max(1e-3);
    (lo - pad, hi + pad)
}

fn whole(values: impl Iterator<Item = f64>) -> bool {
    let mut any = false;
    for v in values.filter(|v| v.is_finite()) {
        any = true;
        if (v - v.round()).abs() > 1e-9 {
            return false;
        }
    }
    any
}

impl Plot {
    /// Ranges and styles; an error when there is nothing to draw or too many series.
    pub fn layout(&self) -> Result<Layout> {
        if self.series.len() > MAX_SERIES {
            bail!(
                "{} series in one plot (at most {MAX_SERIES})",
                self.series.len()
            );
        }
        let points = || self.series.iter().flat_map(|s| s.points.iter().copied());
        let x = extent(
            points()
                .map(|p| p.0)
                .chain(self.references.iter().filter_map(|r| r.x)),
        )
        .ok_or_else(|| anyhow!("nothing to plot for {:?}", self.title))?;
        let mut ys = Vec::new();
        for s in &self.series {
            // Each series' own tail, so that a short run is not focused away.
            let own = extent(s.points.iter().map(|p| p.0)).unwrap_or((0.0, 0.0));
            let from = self
                .focus_tail
                .map_or(f64::NEG_INFINITY, |f| own.1 - f * (own.1 - own.0));
            for (i, &(px, py)) in s.points.iter().enumerate() {
                if px >= from {
                    let half = s.spread.get(i).copied().unwrap_or(0.0).abs();
                    ys.extend([py - half, py + half]);
                }
            }
        }
        ys.extend(self.references.iter().map(|r| r.y));
        let data_y = extent(ys.into_iter()).ok_or_else(|| anyhow!("no finite y values"))?;
        let styles = (0..self.series.len())
            .map(|i| Style {
                colour: i % PALETTE.len(),
                marker: MARKERS[(i + i / PALETTE.len()) % MARKERS.len()],
                dashed: self.series[i].dashed,
            })
            .collect();
        Ok(Layout {
            x: if x.1 > x.0 { x } else { (x.0 - 0.5, x.1 + 0.5) },
            y: padded(data_y),
            styles,
            integer_x: whole(points().map(|p| p.0)),
            integer_y: whole(points().map(|p| p.1)),
        })
    }

    /// Draws the plot to `path` (an `.svg`) and saves its spec beside it.
    pub fn write(&self, path: &Path) -> Result<()> {
        self.render(path)?;
        let spec = serde_json::to_vec_pretty(self)?;
        std::fs::write(path.with_extension("plot.json"), spec)?;
        Ok(())
    }

    /// Draws the plot to `path` only.
    pub fn render(&self, path: &Path) -> Result<()> {
        let layout = self.layout()?;
        self.draw(path, &layout)
            .map_err(|e| anyhow!("plotting {}: {e}", path.display()))
    }

    fn draw(
        &self,
        path: &Path,
        layout: &Layout,
    ) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (1040, 470)).into_drawing_area();
        root.fill(&WHITE)?;
        // The title spans the whole width, above the chart and the legend.
        let root = root.titled(&self.title, ("sans-serif", 15))?;
        let (left, right) = root.split_horizontally(700);
        let mut chart = ChartBuilder::on(&left)
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(62)
            .build_cartesian_2d(layout.x.0..layout.x.1, layout.y.0..layout.y.1)?;
        let x_ticks = tick_format(layout.x, layout.integer_x);
        let y_ticks = tick_format(layout.y, layout.integer_y);
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&|v| x_ticks(*v))
            .y_label_formatter(&|v| y_ticks(*v))
            .draw()?;
        for (s, style) in self.series.iter().zip(&layout.styles) {
            let colour = PALETTE[style.colour];
            let visible = clip(&s.points, layout.y);
            for segment in visible {
                if style.dashed {
                    chart.draw_series(DashedLineSeries::new(
                        segment,
                        7,
                        4,
                        colour.stroke_width(2),
                    ))?;
                } else {
                    chart.draw_series(LineSeries::new(segment, colour.stroke_width(2)))?;
                }
            }
            for (i, &(x, y)) in s.points.iter().enumerate() {
                if let Some(&half) = s.spread.get(i).filter(|h| **h > 0.0) {
                    let (lo, hi) = ((y - half).max(layout.y.0), (y + half).min(layout.y.1));
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x, lo), (x, hi)],
                        colour.stroke_width(1),
                    )))?;
                }
                if y >= layout.y.0 && y <= layout.y.1 {
                    marker(&mut chart, (x, y), style.marker, colour)?;
                }
            }
        }
        for r in &self.references {
            let colour = r
                .series
                .and_then(|i| layout.styles.get(i))
                .map_or(BLACK, |s| PALETTE[s.colour]);
            match r.x {
                Some(x) => {
                    let diamond = vec![(0, -6), (6, 0), (0, 6), (-6, 0), (0, -6)];
                    let hollow = EmptyElement::at((x, r.y))
                        + PathElement::new(diamond, colour.stroke_width(2));
                    chart.draw_series(std::iter::once(hollow))?;
                }
                None => {
                    let line = vec![(layout.x.0, r.y), (layout.x.1, r.y)];
                    chart.draw_series(DashedLineSeries::new(line, 2, 4, colour.stroke_width(1)))?;
                }
            }
        }
        legend(&right, self, layout)?;
        root.present()?;
        Ok(())
    }
}

/// The legend, beside the chart: one row per series, then one per reference.
fn legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    plot: &Plot,
    layout: &Layout,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let font = ("sans-serif", 12).into_font();
    let mut y = 40;
    for (s, style) in plot.series.iter().zip(&layout.styles) {
        let colour = PALETTE[style.colour];
        let line = vec![(4, y), (34, y)];
        if style.dashed {
            area.draw(&PathElement::new(
                vec![(4, y), (12, y)],
                colour.stroke_width(2),
            ))?;
            area.draw(&PathElement::new(
                vec![(18, y), (26, y)],
                colour.stroke_width(2),
            ))?;
        } else {
            area.draw(&PathElement::new(line, colour.stroke_width(2)))?;
        }
        legend_marker(area, (19, y), style.marker, colour, true)?;
        area.draw(&Text::new(shorten(&s.label), (40, y - 6), font.clone()))?;
        y += 18;
    }
    let mut shown: Vec<&str> = Vec::new();
    for r in &plot.references {
        // One legend row per distinct label (a paper's values at several epochs).
        if shown.contains(&r.label.as_str()) {
            continue;
        }
        shown.push(&r.label);
        let colour = r
            .series
            .and_then(|i| layout.styles.get(i))
            .map_or(BLACK, |s| PALETTE[s.colour]);
        match r.x {
            Some(_) => legend_marker(area, (19, y), Marker::Diamond, colour, false)?,
            None => area.draw(&PathElement::new(
                vec![(4, y), (34, y)],
                colour.stroke_width(1),
            ))?,
        }
        area.draw(&Text::new(shorten(&r.label), (40, y - 6), font.clone()))?;
        y += 18;
    }
    Ok(())
}

/// Legend text cut to the width beside the chart.
fn shorten(label: &str) -> String {
    const MAX: usize = 50;
    if label.chars().count() <= MAX {
        label.to_string()
    } else {
        format!("{}…", label.chars().take(MAX - 1).collect::<String>())
    }
}

/// The polyline split into the runs of segments inside the y range (a segment crossing
/// the range's edge is cut there), so that zoomed-out points leave no stray lines.
fn clip(points: &[(f64, f64)], (lo, hi): (f64, f64)) -> Vec<Vec<(f64, f64)>> {
    let finite: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.1.is_finite()).collect();
    let inside = |y: f64| y >= lo && y <= hi;
    let cut = |a: (f64, f64), b: (f64, f64), edge: f64| {
        let t = (edge - a.1) / (b.1 - a.1);
        (a.0 + t * (b.0 - a.0), edge)
    };
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut current: Vec<(f64, f64)> = Vec::new();
    for (i, &p) in finite.iter().enumerate() {
        if i > 0 {
            let a = finite[i - 1];
            match (inside(a.1), inside(p.1)) {
                (true, false) => {
                    current.push(cut(a, p, if p.1 < lo { lo } else { hi }));
                    runs.push(std::mem::take(&mut current));
                    continue;
                }
                (false, true) => current.push(cut(a, p, if a.1 < lo { lo } else { hi })),
                _ => {}
            }
        }
        if inside(p.1) {
            current.push(p);
        }
    }
    runs.push(current);
    runs.retain(|r| !r.is_empty());
    runs
}

/// Tick labels: whole numbers without decimals on an integer axis, else as many decimals
/// as the range needs.
fn tick_format((lo, hi): (f64, f64), integer: bool) -> impl Fn(f64) -> String {
    let step = (hi - lo).abs() / 10.0;
    let decimals = if step > 0.0 {
        (-step.log10().floor()).max(0.0) as usize
    } else {
        2
    };
    move |v: f64| {
        if integer || (v - v.round()).abs() < 1e-9 * v.abs().max(1.0) {
            format!("{v:.0}")
        } else {
            format!("{v:.decimals$}")
        }
    }
}

/// The marker's outline in pixels around its point (`None`: a circle or a cross).
fn outline(kind: Marker) -> Option<Vec<(i32, i32)>> {
    match kind {
        Marker::Circle | Marker::Cross => None,
        Marker::Triangle => Some(vec![(0, -4), (4, 3), (-4, 3)]),
        Marker::Square => Some(vec![(-3, -3), (3, -3), (3, 3), (-3, 3)]),
        Marker::Diamond => Some(vec![(0, -5), (5, 0), (0, 5), (-5, 0)]),
        Marker::Down => Some(vec![(-4, -3), (4, -3), (0, 4)]),
    }
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;
type Drawn = std::result::Result<(), Box<dyn std::error::Error>>;

/// A filled marker at a data point.
fn marker(chart: &mut Chart<'_, '_>, at: (f64, f64), kind: Marker, colour: RGBColor) -> Drawn {
    match (kind, outline(kind)) {
        (Marker::Cross, _) => {
            chart.draw_series(std::iter::once(Cross::new(at, 3, colour.stroke_width(2))))?;
        }
        (_, Some(shape)) => {
            chart.draw_series(std::iter::once(
                EmptyElement::at(at) + Polygon::new(shape, colour.filled()),
            ))?;
        }
        _ => {
            chart.draw_series(std::iter::once(Circle::new(at, 3, colour.filled())))?;
        }
    }
    Ok(())
}

/// A marker in the legend, hollow for the paper's values.
fn legend_marker(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    at: (i32, i32),
    kind: Marker,
    colour: RGBColor,
    filled: bool,
) -> Drawn {
    let style = if filled {
        colour.filled()
    } else {
        colour.stroke_width(2)
    };
    match (kind, outline(kind)) {
        (Marker::Cross, _) => area.draw(&Cross::new(at, 3, colour.stroke_width(2)))?,
        (_, Some(mut shape)) if !filled => {
            shape.push(shape[0]);
            area.draw(&(EmptyElement::at(at) + PathElement::new(shape, style)))?
        }
        (_, Some(shape)) => area.draw(&(EmptyElement::at(at) + Polygon::new(shape, style)))?,
        _ => area.draw(&Circle::new(at, 3, style))?,
    }
    Ok(())
}

/// Writes a line plot with axis titles and a legend to `path` (no paper values, y fitted
/// to every point).
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    Plot {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        series: series.to_vec(),
        ..Plot::default()
    }
    .write(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(n: usize) -> Vec<Series> {
        (0..n)
            .map(|i| Series {
                label: format!("run {i}"),
                points: (1..=5)
                    .map(|e| (e as f64, 90.0 + i as f64 + e as f64 * 0.1))
                    .collect(),
                spread: vec![0.2; 5],
                ..Series::default()
            })
            .collect()
    }

    /// Styles never repeat within the limit; y fits points, spread and references.
    #[test]
    fn every_series_has_its_own_style_and_y_fits_the_data() -> Result<()> {
        let references = vec![Reference {
            label: "paper".into(),
            x: None,
            y: 99.0,
            series: None,
        }];
        let plot = Plot {
            title: "t".into(),
            series: series(MAX_SERIES),
            references,
            ..Plot::default()
        };
        let layout = plot.layout()?;
        let mut seen: Vec<(usize, usize)> = layout
            .styles
            .iter()
            .map(|s| (s.colour, s.marker as usize))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), MAX_SERIES);
        let want = padded((89.9, 119.7));
        assert!((layout.y.0 - want.0).abs() < 1e-9 && (layout.y.1 - want.1).abs() < 1e-9);
        assert!(layout.integer_x && !layout.integer_y);
        let too_many = Plot {
            series: series(MAX_SERIES + 1),
            ..plot
        };
        assert!(too_many.layout().is_err());
        Ok(())
    }

    /// A focused plot fits y to the tail; the early points are cut at the edge.
    #[test]
    fn a_focused_plot_cuts_the_early_climb() -> Result<()> {
        let climb = Series {
            label: "climb".into(),
            points: vec![
                (1.0, 60.0),
                (2.0, 90.0),
                (3.0, 95.0),
                (4.0, 96.0),
                (5.0, 96.5),
            ],
            ..Series::default()
        };
        let plot = Plot {
            title: "t".into(),
            series: vec![climb.clone()],
            focus_tail: Some(0.5),
            ..Plot::default()
        };
        let layout = plot.layout()?;
        assert_eq!(layout.y, padded((95.0, 96.5)));
        let runs = clip(&climb.points, layout.y);
        assert_eq!(runs.len(), 1);
        assert!((runs[0][0].1 - layout.y.0).abs() < 1e-9, "{:?}", runs[0][0]);
        let path = std::env::temp_dir().join("dp-rs-plot-focus.svg");
        plot.write(&path)?;
        assert!(std::fs::read_to_string(&path)?.contains("climb"));
        Ok(())
    }

    #[test]
    fn whole_ticks_print_without_decimals() {
        assert_eq!(tick_format((0.0, 30000.0), true)(5000.0), "5000");
        assert_eq!(tick_format((6.24, 6.4), false)(6.3), "6.30");
        assert_eq!(tick_format((0.0, 1.0), false)(0.5), "0.5");
    }
}

#[cfg(test)]
mod committed {
    use std::path::PathBuf;

    use super::*;
    use crate::config::PlotY;
    use crate::config::TrainingTable;
    use crate::table::{load_paper, papers};

    fn specs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                specs(&path, out)?;
            } else if path.to_string_lossy().ends_with(".plot.json") {
                out.push(path);
            }
        }
        Ok(())
    }

    /// Every committed plot is drawn again from its spec, byte for byte, with a style of
    /// its own per series and y fitted to its data; every training table's per-epoch
    /// plot has one series per configured run.
    #[test]
    fn every_committed_plot_redraws_from_its_spec() -> Result<()> {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/reproduction");
        let mut found = Vec::new();
        specs(&docs, &mut found)?;
        assert!(
            found.len() >= 20,
            "only {} plot specs under docs/reproduction",
            found.len()
        );
        let scratch = std::env::temp_dir().join(format!("dp-rs-plots-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)?;
        for spec in &found {
            let plot: Plot = serde_json::from_str(&std::fs::read_to_string(spec)?)?;
            let layout = plot.layout()?;
            let mut styles: Vec<(usize, usize, bool)> = layout
                .styles
                .iter()
                .map(|s| (s.colour, s.marker as usize, s.dashed))
                .collect();
            styles.sort_unstable();
            styles.dedup();
            assert_eq!(
                styles.len(),
                plot.series.len(),
                "{}: a style repeats",
                spec.display()
            );
            let values = plot.series.iter().flat_map(|s| {
                s.points.iter().enumerate().flat_map(|(i, p)| {
                    let half = s.spread.get(i).copied().unwrap_or(0.0);
                    [p.1 - half, p.1 + half]
                })
            });
            let all = values.chain(plot.references.iter().map(|r| r.y));
            let (lo, hi) = padded(extent(all).unwrap_or((0.0, 0.0)));
            assert!(
                layout.y.0 >= lo - 1e-9 && layout.y.1 <= hi + 1e-9,
                "{}",
                spec.display()
            );
            let svg = spec.with_extension("").with_extension("svg");
            let again = scratch.join("again.svg");
            plot.render(&again)?;
            assert!(
                std::fs::read(&svg)? == std::fs::read(&again)?,
                "{} is not what its spec draws: regenerate it",
                svg.display()
            );
        }
        for (paper, _) in papers()? {
            for table in load_paper(&paper)?.0 {
                let Some(t) = table.kind::<TrainingTable>() else {
                    continue;
                };
                for p in t.plots.iter().filter(|p| p.y == PlotY::Metric) {
                    let spec = docs.join(&paper).join(format!("{}.plot.json", p.file));
                    let Ok(text) = std::fs::read_to_string(&spec) else {
                        continue;
                    };
                    let plot: Plot = serde_json::from_str(&text)?;
                    assert_eq!(plot.series.len(), p.runs.len(), "{}", spec.display());
                }
            }
        }
        Ok(())
    }
}
