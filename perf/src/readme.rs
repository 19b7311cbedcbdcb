//! perf/README.md's tables, rendered from the stored results so that the
//! README can only quote what `perf/results/` holds.
//!
//! Each harness writes `perf/results/<name>.txt` (its printed output; some
//! harnesses print JSON objects in it too). Every region of the README
//! between `<!-- results:NAME -->` and `<!-- /results -->` is produced by
//! `region(NAME, results)` from those files; `render` rewrites every
//! region of a README text and leaves the rest as it is. A rerun of a
//! harness followed by `cargo run -p baton-perf --bin render_readme`
//! updates both; the test `perf_readme_agrees_with_the_stored_results`
//! (`tests/tests/perf_readme.rs`) fails while they disagree.
//!
//! "Goodput" here means only what the harnesses find by search: the
//! highest rate with at most 1% bad. A throughput measured at a fixed
//! offered rate is "in-SLO throughput", shown with its bad rate.

use std::path::{Path, PathBuf};

use serde_json::Value;

const OPEN: &str = "<!-- results:";
const CLOSE: &str = "<!-- /results -->";

/// `perf/README.md`.
pub fn readme_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")
}

/// `perf/results/`.
pub fn results_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("results")
}

/// `readme` with every results region rendered afresh from `results`.
pub fn render(readme: &str, results: &Path) -> Result<String, String> {
    let mut out = String::with_capacity(readme.len());
    let mut rest = readme;
    while let Some(start) = rest.find(OPEN) {
        let (before, from) = rest.split_at(start);
        let name_end = from.find("-->").ok_or("an unclosed `<!-- results:` marker")?;
        let name = from[OPEN.len()..name_end].trim();
        let body = &from[name_end + 3..];
        let end = body.find(CLOSE).ok_or_else(|| format!("region `{name}` has no `{CLOSE}`"))?;
        if body[..end].contains(OPEN) {
            return Err(format!("region `{name}` holds another region"));
        }
        // A region inside a list item keeps the item's indentation.
        let indent = &before[before.rfind('\n').map_or(0, |i| i + 1)..];
        if !indent.chars().all(|c| c == ' ') {
            return Err(format!("region `{name}`: its marker must start a line"));
        }
        out.push_str(before);
        out.push_str(&from[..name_end + 3]);
        out.push('\n');
        for line in region(name, results)?.lines() {
            if !line.is_empty() {
                out.push_str(indent);
            }
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(indent);
        out.push_str(CLOSE);
        rest = &body[end + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The markdown of region `name` (ending in a newline).
pub fn region(name: &str, results: &Path) -> Result<String, String> {
    let read = |file: &str| {
        let path = results.join(file);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let text = match name {
        "sched_speed" => sched_speed(&read("sched_speed.txt")?),
        "hull_bench" => hull_bench(&read("hull_bench.txt")?),
        "subnetact_bench" => subnetact_bench(&read("subnetact_bench.txt")?),
        "orloj_grid" => orloj_grid(&read("orloj_grid.txt")?),
        "flat_top" => flat_top(&read("flat_top.txt")?),
        "engine_bench" => engine_bench(&read("engine_bench.txt")?, &read("wire_bench.txt")?),
        "cuda_serve_h100" => cuda_serve(&read("cuda_serve_h100.txt")?),
        "engine_seeds" => engine_seeds(&read("engine_seeds.txt")?),
        "engine_nexus_glet" => engine_nexus_glet(&read("engine_nexus_glet.txt")?),
        "kserve" => kserve(&read("kserve.txt")?),
        _ => return Err(format!("no results region named `{name}`")),
    };
    text.map_err(|e| format!("region `{name}`: {e}"))
}

/// `x` with `decimals` decimals and thousands separated by commas.
pub fn thousands(x: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if x < 0.0 && s.bytes().any(|b| b.is_ascii_digit() && b != b'0') { "-" } else { "" };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// A rate with an SI suffix as the README writes them: 8.09 M, 478 k.
fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// The JSON objects a harness printed into its results file (each starts
/// on a line of its own with `{` and ends on one with `}`).
fn json_objects(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line == "{" {
            current = Some(String::new());
        }
        if let Some(buf) = current.as_mut() {
            buf.push_str(line);
            buf.push('\n');
            if line == "}" {
                out.push(serde_json::from_str(buf).map_err(|e| format!("a JSON object: {e}"))?);
                current = None;
            }
        }
    }
    Ok(out)
}

fn num(v: &Value, key: &str) -> Result<f64, String> {
    v[key].as_f64().ok_or_else(|| format!("no number `{key}`"))
}

/// The whitespace-separated fields of `line` as numbers, `x` suffixes
/// dropped.
fn fields(line: &str) -> Result<Vec<f64>, String> {
    line.split_whitespace()
        .map(|f| f.trim_end_matches('x').parse::<f64>().map_err(|e| format!("`{f}` in `{line}`: {e}")))
        .collect()
}

/// The number after `key` in `line` (`key` included, e.g. "goodput ").
fn after(line: &str, key: &str) -> Result<f64, String> {
    let rest = &line[line.find(key).ok_or_else(|| format!("no `{key}` in `{line}`"))? + key.len()..];
    let word: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-').collect();
    word.parse().map_err(|e| format!("`{word}` after `{key}` in `{line}`: {e}"))
}

fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

fn sched_speed(text: &str) -> Result<String, String> {
    let runs = json_objects(text)?;
    let base = num(runs.first().ok_or("no runs")?, "offered_rps_virtual")?;
    let mut rows = Vec::new();
    for r in &runs {
        let offered = num(r, "offered_rps_virtual")?;
        let (wall, batched, batches) = (num(r, "wall_s")?, num(r, "batched_requests")?, num(r, "batches")?);
        rows.push(vec![
            format!("{:.0}x capacity ({} r/s)", offered / base, si(offered).replace(" k", "k")),
            format!("**{}**", si(num(r, "requests_per_s")?)),
            format!("{:.0}", num(r, "ns_per_request")?),
            si(batched / wall),
            si(num(r, "batches_per_s")?),
            format!("{:.1}", batched / batches),
            format!("{:.0}%", 100.0 * num(r, "model_shard_share")?),
        ]);
    }
    let head = [
        "offered (virtual)",
        "decided / s, one core",
        "ns / request",
        "batched / s",
        "batches / s",
        "mean batch",
        "model shard share",
    ];
    Ok(table(&head, &rows))
}

fn hull_bench(text: &str) -> Result<String, String> {
    let mut rows = Vec::new();
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let f = fields(line)?;
        let [pending, insert, delete, query, resort, speedup] = f[..] else {
            return Err(format!("6 columns wanted: `{line}`"));
        };
        let bold = |s: String| if pending >= 10_000.0 { format!("**{s}**") } else { s };
        rows.push(vec![
            thousands(pending, 0),
            bold(format!("{insert:.1}")),
            format!("{delete:.1}"),
            bold(format!("{query:.1}")),
            if resort < 1_000.0 { format!("{resort:.1}") } else { thousands(resort, 0) },
            bold(format!("{}x", thousands(speedup, 0))),
        ]);
    }
    Ok(table(&["pending", "insert ns", "delete ns", "query ns", "re-sort ns", "query vs re-sort"], &rows))
}

fn subnetact_bench(text: &str) -> Result<String, String> {
    let r = json_objects(text)?.into_iter().next().ok_or("no JSON object")?;
    let (grouped, alternating) = (num(&r, "grouped_us")?, num(&r, "alternating_us")?);
    let switch = num(&r, "switch_us")?;
    Ok(format!(
        "- Memory: the supernet holds {} parameters (weights plus every\n  \
         subnet's normalisation statistics); the same {} subnets extracted as\n  \
         separate networks hold {} — **{:.2}x** more (paper: up to 2.6x,\n  \
         with its own subnet set).\n\
         - Switching subnet per batch (batches of 16): {} µs per batch grouped by\n  \
         subnet, {} µs alternating subnets every batch — a switch costs\n  \
         **{:+.2} µs** ({:+.2}% of a batch); copying the largest subnet out, what a\n  \
         switch costs without weight sharing, takes {} µs.\n",
        thousands(num(&r, "supernet_params")?, 0),
        num(&r, "subnets")?,
        thousands(num(&r, "extracted_params")?, 0),
        num(&r, "memory_ratio")?,
        thousands(grouped, 0),
        thousands(alternating, 0),
        switch,
        100.0 * switch / grouped,
        thousands(num(&r, "extract_us")?, 0),
    ))
}

fn orloj_grid(text: &str) -> Result<String, String> {
    fn label(shape: &str) -> &str {
        match shape {
            "normal" => "normal (25±5 ms)",
            "bimodal" => "bimodal (10 / 40 ms, 1:1)",
            "trimodal" => "trimodal (10 / 25 / 40 ms)",
            "unequal-peak" => "unequal peaks (10 / 40 ms, 4:1)",
            other => other,
        }
    }
    let mut rows = Vec::new();
    let mut last = String::new();
    let mut static_line = None;
    for line in text.lines().skip(1) {
        if line.starts_with("static") {
            static_line = Some(line);
            continue;
        }
        let (shape, rest) = line.split_once(' ').ok_or_else(|| format!("`{line}`"))?;
        let f = fields(rest)?;
        let [slo, _load, orloj, clockwork, nexus, clipper, gain] = f[..] else {
            return Err(format!("7 numbers wanted: `{line}`"));
        };
        let name = if shape == last { String::new() } else { label(shape).to_string() };
        last = shape.to_string();
        // Bold: at least the +50% target.
        let gain = if gain >= 1.5 { format!("**{gain:.2}x**") } else { format!("{gain:.2}x") };
        let cells = [orloj, clockwork, nexus, clipper].map(|x| format!("{x:.3}"));
        rows.push([vec![name, format!("{slo:.1}")], cells.to_vec(), vec![gain]].concat());
    }
    let head = ["shape (apps)", "SLO / P99", "orloj", "clockwork", "nexus", "clipper", "orloj / best baseline"];
    let mut s = table(&head, &rows);
    let st = static_line.ok_or("no static line")?;
    s.push_str(&format!(
        "\nStatic models (Table 4 ResNet50): `orloj` reaches {} r/s against\nsymphony's {} ({:.3}; target within 5%).\n",
        thousands(after(st, "orloj ")?, 0),
        thousands(after(st, "symphony ")?, 0),
        after(st, "orloj/symphony ")?,
    ));
    Ok(s)
}

fn flat_top(text: &str) -> Result<String, String> {
    // policy -> (p, [(o/p, in-SLO/p, idle)])
    let mut runs: Vec<(String, f64, Vec<[f64; 3]>)> = Vec::new();
    for line in text.lines().skip(2) {
        let Some((policy, rest)) = line.split_once(' ') else { continue };
        let Ok(f) = fields(rest) else { continue };
        let [p, ratio, _offered, _in_slo, in_slo_p, _bad, idle, _gap, _batch] = f[..] else { continue };
        match runs.iter_mut().find(|r| r.0 == policy) {
            Some(r) => r.2.push([ratio, in_slo_p, idle]),
            None => runs.push((policy.to_string(), p, vec![[ratio, in_slo_p, idle]])),
        }
    }
    let of = |policy: &str| runs.iter().find(|r| r.0 == policy).ok_or(format!("no {policy} runs"));
    let (sym, front, cw) = (of("symphony")?, of("symphony-frontrun")?, of("clockwork")?);
    let at = |run: &(String, f64, Vec<[f64; 3]>), ratio: f64| {
        run.2.iter().find(|x| (x[0] - ratio).abs() < 1e-9).copied().ok_or(format!("{} has no o/p {ratio}", run.0))
    };
    let mut rows = Vec::new();
    for ratio in [0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 3.0] {
        let (s, f, c) = (at(sym, ratio)?, at(front, ratio)?, at(cw, ratio)?);
        let gap = if ratio <= 1.0 { format!("{:.2}", 1.0 - ratio) } else { String::new() };
        rows.push(vec![
            format!("{ratio:.2}"),
            format!("{:.3}", s[1]),
            format!("{:.3}", s[2]),
            format!("{:.3}", f[1]),
            format!("{:.3}", f[2]),
            gap,
            format!("{:.3}", c[1]),
        ]);
    }
    let head =
        ["o/p", "symphony in-SLO/p", "idle", "symphony-frontrun in-SLO/p", "idle", "(p-o)/p", "clockwork in-SLO/p"];
    Ok(format!(
        "{}\n(p: symphony {}, symphony-frontrun {}, clockwork {} r/s.)\n",
        table(&head, &rows),
        thousands(sym.1, 0),
        thousands(front.1, 0),
        thousands(cw.1, 0)
    ))
}

fn engine_bench(text: &str, wire: &str) -> Result<String, String> {
    let line = |prefix: &str| {
        text.lines().find(|l| l.trim_start().starts_with(prefix)).ok_or_else(|| format!("no line `{prefix}`"))
    };
    let overheads: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("engine overhead")).collect();
    let parts = |l: &str| -> Result<Vec<String>, String> {
        ["ingress ", "start lag ", "completion ", "egress "]
            .iter()
            .map(|k| {
                let rest = &l[l.find(k).ok_or_else(|| format!("no `{k}` in `{l}`"))? + k.len()..];
                Ok(rest.split_whitespace().next().unwrap_or("").to_string())
            })
            .collect()
    };
    let (t4, at) = (line("Table 4")?, line("at sim goodput")?);
    let sent = after(at, " of ")?;
    let bad = |l: &str| -> Result<String, String> {
        Ok(format!("{:.2}%", 100.0 * (after(l, "late ")? + after(l, "dropped ")?) / sent))
    };
    let (tcp, split) = (line("the same load with frontend")?, line("the same load with Symphony")?);
    let placed = line("engine on cores")?.trim();
    let mut s = format!(
        "{}{} (every run below).\n\nTable 4 ResNet50 (8 GPUs, 25 ms SLO, Poisson), 10 s runs: goodput (the highest\nrate at <= 1% bad as the client sees it, by search) **{} r/s** for the engine\nagainst {} r/s for `baton sim` on the same file and seed: **{:.3}**\n({} probes).\n\nAt the simulator's goodput rate ({} requests):\n\n",
        placed[..1].to_uppercase(),
        &placed[1..],
        thousands(after(t4, "engine ")?, 1),
        thousands(after(t4, "sim ")?, 1),
        after(t4, "ratio ")?,
        after(&t4[t4.rfind('(').unwrap_or(0)..], "(")?,
        thousands(sent, 0)
    );
    let rows = vec![
        vec!["`serve` (two shards)".into(), thousands(after(at, "in SLO ")?, 1), bad(at)?, "—".into()],
        vec![
            "the three roles over TCP".into(),
            thousands(after(tcp, "in SLO ")?, 1),
            bad(tcp)?,
            format!("{:.3} of `serve`", after(tcp, "ratio to serve ")?),
        ],
        vec![
            "`--model-shards 1`".into(),
            thousands(after(split, "in SLO ")?, 1),
            bad(split)?,
            format!("{:.3} of `serve`", after(split, "ratio to serve ")?),
        ],
    ];
    s.push_str(&table(&["engine", "in-SLO r/s", "bad rate", "ratio"], &rows));
    let roles = line("goodput with frontend")?;
    s.push_str(&format!(
        "\nThe three roles over TCP, goodput by the same search: **{} r/s**, **{:.3}** of\nthe simulator's ({} probes).\n",
        thousands(after(roles, "TCP: ")?, 1),
        after(roles, "ratio to sim ")?,
        after(&roles[roles.rfind('(').unwrap_or(0)..], "(")?,
    ));
    s.push_str(&format!(
        "\n`serve`: {} answered ok but late as the client measures it ({} late by\nthe engine's clock), {} dropped; latency p50 {:.1} ms, p99 {:.1} ms; mean\nbatch {:.2}.\n",
        thousands(after(at, "late ")?, 0),
        thousands(after(at, "clock ")?, 0),
        thousands(after(at, "dropped ")?, 0),
        after(at, "p50 ")?,
        after(at, "p99 ")?,
        after(at, "mean batch ")?,
    ));
    let sustained = line("highest sustained")?;
    let half = line("at half")?;
    let mut rows = Vec::new();
    let runs = [
        "Table 4 at the sim's goodput",
        "tiny requests at half the sustained rate",
        "the same, engine busy-polling, generator spinning",
    ];
    for (what, l) in runs.iter().zip(&overheads) {
        let mut row = vec![what.to_string()];
        row.extend(parts(l)?);
        rows.push(row);
    }
    s.push_str("\nThe time the engine adds beyond its plan, p50/p99/p99.9 µs (`tools/src/overhead.rs`):\n\n");
    s.push_str(&table(&["run", "ingress", "start lag", "completion", "egress"], &rows));
    let (fresh, reused) = (after(wire, "fresh buffer ")?, after(wire, "reused one ")?);
    s.push_str(&format!(
        "\nSustained rate (tiny requests, 16 emulated GPUs): **{} r/s**; at half\nof it client latency p50 {} ms, p99 {} ms. Wire codec per answer: {fresh} ns\nencoded into a fresh buffer, {reused} ns into a reused one ({:.2}x), {} ns to\ndecode; a client's request read in place {} ns.\n",
        thousands(after(sustained, "GPUs): ")?, 0),
        after(half, "latency p50 ")?,
        after(half.split("latency").nth(1).unwrap_or(""), "p99 ")?,
        fresh / reused,
        after(wire, "decode ")?,
        after(wire, "viewed in place ")?,
    ));
    Ok(s)
}

fn cuda_serve(text: &str) -> Result<String, String> {
    // Runs are grouped under `# ...` comment lines: `# final: ...` (the
    // engine as it is), `# the three-model profile ...`, and earlier
    // versions of the engine, which the README quotes in prose.
    let groups: Vec<&str> = text.split("\n# ").collect();
    let group = |start: &str| groups.iter().find(|g| g.starts_with(start)).ok_or(format!("no `# {start}` runs"));
    let (last, three) = (group("final")?, group("the three-model")?);
    Ok(format!(
        "{}\nThe three-model profile (`baton sim --find-goodput`: {} r/s), at half\nof that rate and at it:\n\n{}",
        serve_runs(last)?,
        after(three, "--find-goodput: ")?,
        serve_runs(three)?
    ))
}

/// One row per run of perf/scripts/engine_seeds.sh (`== title` and a
/// `baton demo`): the share of requests answered ok within their SLO as
/// the client saw it, beside the simulator's on the same file, rate and
/// seed, and the mean accuracy the engine served where it served subnets.
fn engine_seeds(text: &str) -> Result<String, String> {
    let mut rows = Vec::new();
    for block in text.split("\n== ").skip(1) {
        let title = block.lines().next().unwrap_or("").trim();
        let line =
            |p: &str| block.lines().find(|l| l.starts_with(p)).ok_or_else(|| format!("`{title}`: no `{p}` line"));
        let (engine, sim) = (after(line("in SLO")?, "bad rate ")?, after(line("baton sim")?, "bad rate ")?);
        let accuracy = match line("mean accuracy") {
            Ok(l) => format!("{:.2}%", after(l, "answers ")?),
            Err(_) => "—".into(),
        };
        let sent = after(line("sent ")?, "sent ")?;
        rows.push(vec![
            title.to_string(),
            thousands(sent, 0),
            format!("{:.4}", 1.0 - engine),
            format!("{:.4}", 1.0 - sim),
            accuracy,
        ]);
    }
    Ok(table(&["run", "sent", "engine in SLO", "sim in SLO", "engine mean accuracy"], &rows))
}

/// perf/scripts/engine_nexus_glet.sh's two parts: per scenario, goodput
/// in the simulator and in the engine and the engine's run at the
/// simulator's rate; then prefix batching's goodput, batched and apart.
fn engine_nexus_glet(text: &str) -> Result<String, String> {
    let mut runs = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate().filter(|(_, l)| l.contains(": sim goodput ")) {
        let name = l.split(':').next().unwrap_or("").trim();
        let at =
            lines.get(i + 1).filter(|n| n.contains("engine at the sim's rate")).ok_or("no run at the sim's rate")?;
        let (sim, engine) = (after(l, "sim goodput ")?, after(l, "engine goodput ")?);
        runs.push(vec![
            name.to_string(),
            thousands(sim, 1),
            thousands(engine, 1),
            format!("{:.3}", engine / sim),
            format!("{:.2}%", 100.0 * after(at, "bad rate ")?),
            format!("{:.0}", after(at, "unanswered ")?),
            format!("{:.0}", after(at, "duplicates ")?),
        ]);
    }
    let mut prefix = Vec::new();
    let start = lines.iter().position(|l| l.starts_with("variants")).ok_or("no prefix table")?;
    for l in &lines[start + 1..] {
        // Seven words; a ratio the run could not take reads `(—)`.
        let w: Vec<f64> =
            l.split_whitespace().map(|x| x.trim_matches(['(', ')']).parse().unwrap_or(f64::NAN)).collect();
        let [k, sb, sa, eb, _, ea, _] = w[..] else { continue };
        let n = |x: f64| thousands(x, 0);
        // Below 1 r/s the search found no rate that works: nothing fits apart.
        let gain = |a: f64, b: f64| if b >= 1.0 { format!("{:.2}", a / b) } else { "— (none fits apart)".into() };
        prefix.push(vec![n(k), n(sb), n(sa), gain(sb, sa), n(eb), n(ea), gain(eb, ea)]);
    }
    let head = [
        "scenario / policy",
        "sim goodput",
        "engine goodput",
        "ratio",
        "engine bad at sim's rate",
        "unanswered",
        "duplicates",
    ];
    let prefix_head =
        ["variants", "sim batched", "sim apart", "sim gain", "engine batched", "engine apart", "engine gain"];
    Ok(format!(
        "{}
{}",
        table(&head, &runs),
        table(&prefix_head, &prefix)
    ))
}

/// One row per `baton demo` run in `text`.
/// `perf/scripts/kserve.sh`: perf_analyzer over HTTP and gRPC, `baton
/// load` over the binary protocol, and `baton sim`, at one rate on one
/// scenario.
fn kserve(text: &str) -> Result<String, String> {
    let sections: Vec<&str> = text.split("\n## ").skip(1).collect();
    let find = |s: &str, key: &str| -> Result<f64, String> {
        let line = s.lines().find(|l| l.contains(key)).ok_or_else(|| format!("no `{key}`"))?;
        after(line, key)
    };
    let mut rows = Vec::new();
    let mut binary_p50 = None;
    for s in &sections {
        let title = s.lines().next().unwrap_or("");
        let (client, transport, rps, p50, p99) = if title.starts_with("baton sim") {
            // The model's row of the simulator's table: name, offered, bad, p50, p99, ...
            let row = s.lines().find(|l| l.starts_with("ResNet50")).ok_or("no model row in the sim's report")?;
            let w: Vec<f64> = row.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            let [_, _, p50, p99, ..] = w[..] else { return Err(format!("a short row: {row}")) };
            ("baton sim", "simulator (same file, rate, seed)".to_string(), find(s, "goodput ")?, p50, p99)
        } else if title.starts_with("perf_analyzer") {
            let transport = title.rsplit(" over ").next().unwrap_or("").to_string();
            let us = |k: &str| find(s, k).map(|x| x / 1e3);
            (
                "perf_analyzer",
                format!("KServe v2, {transport}"),
                find(s, "Throughput: ")?,
                us("p50 latency: ")?,
                us("p99 latency: ")?,
            )
        } else {
            let (p50, p99) = (find(s, "latency p50 ")?, find(s, " p99 ")?);
            binary_p50 = Some(p50);
            ("baton load", "binary protocol".to_string(), find(s, "in SLO ")?, p50, p99)
        };
        rows.push((client, transport, rps, p50, p99));
    }
    let base = binary_p50.ok_or("no binary-protocol run")?;
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(client, transport, rps, p50, p99)| {
            let extra = match client {
                "perf_analyzer" => format!("+{:.2}", p50 - base),
                "baton sim" => format!("{:+.2}", p50 - base),
                _ => "—".to_string(),
            };
            vec![transport, client.to_string(), format!("{rps:.1}"), format!("{p50:.2}"), format!("{p99:.2}"), extra]
        })
        .collect();
    let head = ["transport", "client", "answered (r/s)", "p50 (ms)", "p99 (ms)", "p50 beyond the binary protocol (ms)"];
    Ok(table(&head, &rows))
}

fn serve_runs(text: &str) -> Result<String, String> {
    let mut rows = Vec::new();
    for block in text.split("baton demo: serving").skip(1) {
        let line = |prefix: &str| {
            block.lines().find(|l| l.trim_start().starts_with(prefix)).ok_or_else(|| format!("no line `{prefix}`"))
        };
        let offered = after(block.lines().next().unwrap_or(""), "; ")?;
        let client = line("goodput")?;
        let sim = line("baton sim")?;
        let stats = line("connections")?;
        let (engine_rps, sim_rps) = (after(client, "goodput ")?, after(sim, "goodput ")?);
        rows.push(vec![
            thousands(offered, 1).trim_end_matches(".0").to_string(),
            thousands(engine_rps, 1),
            format!("{:.1}%", 100.0 * after(client, "bad rate ")?),
            thousands(sim_rps, 1),
            format!("{:.2}%", 100.0 * after(sim, "bad rate ")?),
            format!("{:.3}", engine_rps / sim_rps),
            format!("{:.2}", after(stats, "mean batch ")?),
            format!("{:.0} µs", after(stats, "start lag mean ")?),
        ]);
    }
    let head = [
        "offered r/s",
        "engine in-SLO r/s",
        "engine bad rate",
        "sim in-SLO r/s",
        "sim bad rate",
        "ratio",
        "engine mean batch",
        "start lag mean",
    ];
    Ok(table(&head, &rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_the_readme_writes_them() {
        assert_eq!(thousands(1234567.891, 1), "1,234,567.9");
        assert_eq!(thousands(999.0, 0), "999");
        assert_eq!(thousands(-0.4, 0), "0");
        assert_eq!(thousands(-1500.0, 0), "-1,500");
        assert_eq!(si(8_089_741.0), "8.09 M");
        assert_eq!(si(477_946.0), "478 k");
    }

    #[test]
    fn regions_are_rewritten_and_the_rest_kept() {
        let dir = std::env::temp_dir().join(format!("baton-readme-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hull_bench.txt"), "pending insert\n10 1.0 2.0 3.0 4.0 5x\n").unwrap();
        let text = "a\n<!-- results:hull_bench -->\nstale\n<!-- /results -->\nb\n";
        let out = render(text, &dir).unwrap();
        assert!(out.starts_with("a\n<!-- results:hull_bench -->\n| pending |"), "{out}");
        assert!(out.contains("| 10 | 1.0 | 2.0 | 3.0 | 4.0 | 5x |\n<!-- /results -->\nb\n"), "{out}");
        assert_eq!(render(&out, &dir).unwrap(), out, "rendering is idempotent");
        assert!(render("<!-- results:nope -->\n<!-- /results -->", &dir).unwrap_err().contains("nope"));
        assert!(render("<!-- results:hull_bench -->\n", &dir).unwrap_err().contains("no `<!-- /results -->`"));
        let nested = render("1. item\n   <!-- results:hull_bench -->\n   <!-- /results -->\n", &dir).unwrap();
        assert!(nested.contains("\n   | 10 | 1.0 |") && nested.ends_with("\n   <!-- /results -->\n"), "{nested}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
