//! `baton topology [--json]`: what placement sees of this machine — NUMA
//! nodes and their cores, the node each GPU and network interface hangs
//! off — through every view this build has: the kernel's `/sys`, and hwloc
//! when built with the feature `hwloc`, side by side, with whether they
//! agree. `--numa-node`, `--near-gpu` and `--near-nic` place shards by the
//! best of them (hwloc's when built).

use std::collections::BTreeMap;

use baton_core::runtime::topology::{self, Sys, Topology};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// One view's answers, as JSON.
fn describe(t: &dyn Topology) -> Result<Value, String> {
    let mut nodes = BTreeMap::new();
    for n in t.nodes()? {
        nodes.insert(n.to_string(), json!(t.node_cores(n)?));
    }
    // GPUs until the first that is not there.
    let gpus: Vec<Option<usize>> = (0..).map_while(|g| t.gpu_node(g).ok()).collect();
    let mut nics = BTreeMap::new();
    let names = std::fs::read_dir("/sys/class/net").map_err(|e| format!("/sys/class/net: {e}"))?;
    for name in names.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
        nics.insert(name.clone(), json!(t.nic_node(&name)?));
    }
    Ok(json!({ "view": t.name(), "nodes": nodes, "gpus": gpus, "nics": nics }))
}

pub fn run(a: Args) -> Result<(), String> {
    let mut views = vec![describe(&Sys)?];
    let best = topology::system()?;
    if best.name() != Sys.name() {
        views.push(describe(best.as_ref())?);
    }
    let strip = |v: &Value| json!({ "nodes": v["nodes"], "gpus": v["gpus"], "nics": v["nics"] });
    let agree = views.windows(2).all(|w| strip(&w[0]) == strip(&w[1]));
    if a.json {
        println!("{}", json!({ "views": views, "agree": agree }));
        return Ok(());
    }
    for v in &views {
        println!("{}:", v["view"].as_str().unwrap_or("?"));
        for (node, cores) in v["nodes"].as_object().into_iter().flatten() {
            println!("  node {node}: cores {cores}");
        }
        println!("  gpus (node each): {}", v["gpus"]);
        println!("  nics (node each): {}", v["nics"]);
    }
    match views.len() {
        1 => println!("(built without hwloc: the /sys view alone)"),
        _ => println!("views agree: {agree}"),
    }
    Ok(())
}
