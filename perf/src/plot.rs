//! A small SVG line-plot writer: enough for the curves the harnesses save
//! next to their tables, with no plotting dependency.

use std::fmt::Write;

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

pub struct Plot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#555555"];
const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|&x| x >= v).unwrap_or(10.0 * mag)
}

impl Plot {
    /// Renders the plot; axes start at 0 and end at a round number above the data.
    pub fn to_svg(&self) -> String {
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let x_max = nice_max(pts.clone().map(|p| p.0).fold(0.0, f64::max));
        let y_max = nice_max(pts.map(|p| p.1).fold(0.0, f64::max));
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let sx = |x: f64| LEFT + x / x_max * pw;
        let sy = |y: f64| TOP + ph - y / y_max * ph;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            self.title
        );
        for i in 0..=5 {
            let (fx, fy) = (x_max * i as f64 / 5.0, y_max * i as f64 / 5.0);
            let _ = writeln!(
                s,
                r##"<line x1="{x}" y1="{t}" x2="{x}" y2="{b}" stroke="#eee"/><text x="{x}" y="{ty}" text-anchor="middle">{fx:.2}</text>"##,
                x = sx(fx),
                t = TOP,
                b = TOP + ph,
                ty = TOP + ph + 16.0
            );
            let _ = writeln!(
                s,
                r##"<line x1="{l}" y1="{y}" x2="{r}" y2="{y}" stroke="#eee"/><text x="{tx}" y="{y}" text-anchor="end" dy="4">{fy:.2}</text>"##,
                y = sy(fy),
                l = LEFT,
                r = LEFT + pw,
                tx = LEFT - 6.0
            );
        }
        let _ = writeln!(s, r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 15.0,
            self.x_label
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + ph / 2.0,
            self.y_label
        );
        for (i, ser) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let path: Vec<String> = ser.points.iter().map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y))).collect();
            let dash = if ser.dashed { r#" stroke-dasharray="5,4""# } else { "" };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
                path.join(" ")
            );
            for &(x, y) in &ser.points {
                let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}"/>"#, sx(x), sy(y));
            }
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{a}" y1="{ly}" x2="{b}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{c}" y="{ly}" dy="4">{n}</text>"#,
                a = W - RIGHT + 12.0,
                b = W - RIGHT + 36.0,
                c = W - RIGHT + 42.0,
                n = ser.name
            );
        }
        s.push_str("</svg>\n");
        s
    }
}
