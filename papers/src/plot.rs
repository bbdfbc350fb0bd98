//! SVG line plots of per-epoch curves (plotters, SVG backend only: no font files needed,
//! the text is left to the viewer).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One curve.
pub struct Series {
    /// Legend entry.
    pub label: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
    /// Dashed (for a second family of lines, e.g. the CLT twin of a run).
    pub dashed: bool,
}

const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// Writes a line plot with axis titles and a legend to `path`.
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    let points = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        return Err(anyhow!("nothing to plot for {}", path.display()));
    }
    let pad = ((y1 - y0) * 0.05).max(1e-3);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let x1 = if x1 > x0 { x1 } else { x0 + 1.0 };
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (720, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(58)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let style = color.stroke_width(2);
            let finite: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|p| p.1.is_finite())
                .collect();
            if s.dashed {
                chart
                    .draw_series(DashedLineSeries::new(finite.clone(), 6, 4, style))?
                    .label(s.label.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            } else {
                chart
                    .draw_series(LineSeries::new(finite.clone(), style))?
                    .label(s.label.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            }
            chart.draw_series(finite.iter().map(|&p| Circle::new(p, 2, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("plotting {}: {e}", path.display()))
}
