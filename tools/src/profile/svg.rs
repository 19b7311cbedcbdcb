//! A histogram of per-input solo latency by app, as a hand-written SVG:
//! one series of bars per app over shared bins of `[0, max]`, each bar's
//! height its share of the app's inputs.

use super::dynamic_scenario::AppProfile;

const W: f64 = 640.0;
const H: f64 = 360.0;
const PAD: f64 = 48.0;
const BINS: usize = 48;
const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// The histogram of `apps`' solo times (ms), titled `title`.
pub fn histogram(title: &str, apps: &[AppProfile]) -> String {
    let top = apps.iter().flat_map(|a| a.solo_ms()).fold(0.0, f64::max).max(1e-6);
    let width = top / BINS as f64;
    let shares: Vec<Vec<f64>> = apps
        .iter()
        .map(|a| {
            let mut h = vec![0.0; BINS];
            for x in a.solo_ms() {
                h[((x / width) as usize).min(BINS - 1)] += 1.0 / a.samples.len().max(1) as f64;
            }
            h
        })
        .collect();
    let peak = shares.iter().flatten().copied().fold(0.0, f64::max).max(1e-9);
    let (pw, ph) = (W - 2.0 * PAD, H - 2.0 * PAD);
    let bar = pw / BINS as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        W / 2.0,
        escape(title)
    );
    for (i, (a, h)) in apps.iter().zip(&shares).enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        for (k, &v) in h.iter().enumerate().filter(|(_, v)| **v > 0.0) {
            let bh = v / peak * ph;
            s += &format!(
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"{c}\" fill-opacity=\"0.6\"/>\n",
                PAD + k as f64 * bar,
                PAD + ph - bh,
                bar
            );
        }
        s += &format!(
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{} ({} inputs)</text>\n",
            W - PAD - 150.0,
            PAD + 16.0 * i as f64,
            W - PAD - 135.0,
            PAD + 9.0 + 16.0 * i as f64,
            escape(&a.name),
            a.samples.len()
        );
    }
    let (x0, y0) = (PAD, PAD + ph);
    s += &format!(
        "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{}\" y2=\"{y0}\" stroke=\"black\"/>\n\
         <line x1=\"{x0}\" y1=\"{PAD}\" x2=\"{x0}\" y2=\"{y0}\" stroke=\"black\"/>\n",
        PAD + pw
    );
    for k in 0..=4 {
        let f = k as f64 / 4.0;
        s += &format!(
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{:.3}</text>\n<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.2}</text>\n",
            x0 + f * pw,
            y0 + 16.0,
            f * top,
            x0 - 4.0,
            y0 - f * ph + 4.0,
            f * peak
        );
    }
    s += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">solo latency (ms)</text>\n\
         <text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">share of the app's inputs</text>\n</svg>\n",
        W / 2.0,
        H - 8.0,
        H / 2.0,
        H / 2.0
    );
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_bar_series_per_app() {
        let app = |name: &str, xs: &[f64]| AppProfile {
            name: name.into(),
            weight: 1.0,
            lengths: 1..=2,
            samples: xs.iter().map(|&x| (1, x)).collect(),
        };
        let s = histogram("a <title>", &[app("short", &[0.1, 0.1, 0.2]), app("long", &[0.9])]);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("a &lt;title&gt;") && s.contains("short (3 inputs)") && s.contains("long (1 inputs)"));
        assert_eq!(s.matches("fill-opacity").count(), 3, "two bins of short, one of long");
    }
}
