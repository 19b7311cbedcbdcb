//! Where the shards run. Operators place a deployment on a NUMA node —
//! named (`--numa-node N`), or the one a GPU or NIC hangs off
//! (`--near-gpu I`, `--near-nic NAME`) — and the shards are pinned to that
//! node's cores (those this process may run on) with their memory bound
//! to it.
//!
//! Two views of the machine answer the same questions (`Topology`):
//! the kernel's `/sys` (`Sys`, the default build: cpulists, the PCI
//! devices' `numa_node`, `set_mempolicy`), and hwloc (`hwloc.rs`, the cargo
//! feature `hwloc`), which also knows machines where `/sys` does not tell
//! the whole story. GPUs are numbered as CUDA numbers them with
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID`: NVIDIA display and 3D controllers by PCI
//! address. A device with no NUMA affinity (a virtual NIC, a one-node
//! machine that does not say) leaves the shards on every core.

use std::path::Path;

/// What to place a deployment near.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Near {
    Node(usize),
    Gpu(usize),
    Nic(String),
}

/// The questions placement asks of the machine.
pub trait Topology {
    /// Which view this is (`sys` or `hwloc`).
    fn name(&self) -> &'static str;
    /// The NUMA nodes, by OS index.
    fn nodes(&self) -> Result<Vec<usize>, String>;
    /// The cores (OS indices) of node `node`.
    fn node_cores(&self, node: usize) -> Result<Vec<usize>, String>;
    /// The node GPU `gpu` hangs off (None: it has no NUMA affinity).
    fn gpu_node(&self, gpu: usize) -> Result<Option<usize>, String>;
    /// The node network interface `nic` hangs off (None: no affinity).
    fn nic_node(&self, nic: &str) -> Result<Option<usize>, String>;
    /// Binds the calling thread's future allocations to node `node`.
    fn bind_memory(&self, node: usize) -> Result<(), String>;
}

/// The best view this build has: hwloc's when built with it, else `/sys`.
pub fn system() -> Result<Box<dyn Topology>, String> {
    #[cfg(feature = "hwloc")]
    return Ok(Box::new(super::hwloc::Hwloc::new()?));
    #[cfg(not(feature = "hwloc"))]
    Ok(Box::new(Sys))
}

/// Where the shards go: their cores, in order, and the node their memory
/// is bound to (None: no placement asked, or no affinity known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub cores: Vec<usize>,
    pub node: Option<usize>,
}

/// The placement for `near` (None: every core this process may run on),
/// kept to the cores in `only` where the operator lists them (the load
/// generator on the others, say).
pub fn place_on(near: Option<&Near>, only: Option<&[usize]>) -> Result<Placement, String> {
    let mut p = place(near)?;
    if let Some(only) = only {
        p.cores.retain(|c| only.contains(c));
        if p.cores.is_empty() {
            return Err(format!("none of the cores {only:?} is one this process may run on (near {near:?})"));
        }
    }
    Ok(p)
}

/// The placement for `near` (None: every core this process may run on).
pub fn place(near: Option<&Near>) -> Result<Placement, String> {
    let allowed: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
    let anywhere = || Placement { cores: if allowed.is_empty() { vec![0] } else { allowed.clone() }, node: None };
    let Some(near) = near else { return Ok(anywhere()) };
    let topo = system()?;
    let node = match near {
        Near::Node(n) => Some(*n),
        Near::Gpu(g) => topo.gpu_node(*g)?,
        Near::Nic(nic) => topo.nic_node(nic)?,
    };
    let Some(node) = node else { return Ok(anywhere()) };
    let cores: Vec<usize> =
        topo.node_cores(node)?.into_iter().filter(|c| allowed.is_empty() || allowed.contains(c)).collect();
    if cores.is_empty() {
        return Err(format!("NUMA node {node} has no core this process may run on"));
    }
    Ok(Placement { cores, node: Some(node) })
}

/// Binds the calling shard thread's memory to `node`, if placed on one.
pub fn bind_memory(node: Option<usize>) -> Result<(), String> {
    match node {
        Some(n) => system()?.bind_memory(n),
        None => Ok(()),
    }
}

/// The kernel's view, through `/sys`.
pub struct Sys;

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A `numa_node` file: -1 (or none at all) means no affinity.
fn numa_node_file(path: &Path) -> Result<Option<usize>, String> {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok(s) => Ok(s.trim().parse::<usize>().ok()),
    }
}

/// Whether a PCI vendor and class are an NVIDIA display or 3D controller.
pub fn is_nvidia_gpu(vendor: u16, class: u16) -> bool {
    vendor == 0x10de && (class == 0x0300 || class == 0x0302)
}

impl Topology for Sys {
    fn name(&self) -> &'static str {
        "sys"
    }

    fn nodes(&self) -> Result<Vec<usize>, String> {
        let online = Path::new("/sys/devices/system/node/online");
        if !online.exists() {
            return Ok(vec![0]);
        }
        parse_cpulist(&read(online)?)
    }

    fn node_cores(&self, node: usize) -> Result<Vec<usize>, String> {
        let path = format!("/sys/devices/system/node/node{node}/cpulist");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("NUMA node {node}: {path}: {e}"))?;
        parse_cpulist(&text)
    }

    fn gpu_node(&self, gpu: usize) -> Result<Option<usize>, String> {
        let hex = |p: std::path::PathBuf| -> Option<u32> {
            u32::from_str_radix(std::fs::read_to_string(p).ok()?.trim().trim_start_matches("0x"), 16).ok()
        };
        let mut gpus: Vec<std::path::PathBuf> = std::fs::read_dir("/sys/bus/pci/devices")
            .map_err(|e| format!("/sys/bus/pci/devices: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|d| match (hex(d.join("vendor")), hex(d.join("class"))) {
                (Some(v), Some(c)) => is_nvidia_gpu(v as u16, (c >> 8) as u16),
                _ => false,
            })
            .collect();
        // PCI addresses (domain:bus:device.function, fixed-width hex) sort
        // as CUDA's PCI_BUS_ID order does.
        gpus.sort();
        let dev = gpus.get(gpu).ok_or_else(|| format!("no GPU {gpu}: {} NVIDIA GPUs on the PCI bus", gpus.len()))?;
        numa_node_file(&dev.join("numa_node"))
    }

    fn nic_node(&self, nic: &str) -> Result<Option<usize>, String> {
        let dir = Path::new("/sys/class/net").join(nic);
        if nic.contains('/') || !dir.exists() {
            return Err(format!("no network interface `{nic}`"));
        }
        numa_node_file(&dir.join("device/numa_node"))
    }

    fn bind_memory(&self, node: usize) -> Result<(), String> {
        const MPOL_BIND: libc::c_long = 2;
        // The kernel's own bound on nodes (MAX_NUMNODES) is 1,024.
        if node >= 1 << 10 {
            return Err(format!("NUMA node {node}: beyond any node the kernel numbers"));
        }
        let mut mask = vec![0 as libc::c_ulong; node / libc::c_ulong::BITS as usize + 1];
        mask[node / libc::c_ulong::BITS as usize] |= 1 << (node % libc::c_ulong::BITS as usize);
        let max_node = (mask.len() * libc::c_ulong::BITS as usize) as libc::c_ulong;
        // SAFETY: set_mempolicy(2) reads `max_node` bits from `mask`, which
        // holds that many; it changes only the calling thread's policy.
        let rc = unsafe { libc::syscall(libc::SYS_set_mempolicy, MPOL_BIND, mask.as_ptr(), max_node) };
        if rc != 0 {
            return Err(format!("set_mempolicy(MPOL_BIND, node {node}): {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// Parses a kernel cpulist such as `0-3,8,10-11`.
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("bad cpulist entry `{part}`");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), Ok(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpulist(""), Ok(vec![]));
        assert!(parse_cpulist("3-1").is_err());
        assert!(parse_cpulist("a").is_err());
        assert!(parse_cpulist("1-x").is_err());
    }

    #[test]
    fn node_zero_has_cores_and_a_missing_node_is_an_error() {
        // Every Linux machine has node 0 when it exposes NUMA at all.
        if Path::new("/sys/devices/system/node/node0").exists() {
            let p = place(Some(&Near::Node(0))).unwrap();
            assert_eq!(p.node, Some(0));
            assert!(!p.cores.is_empty());
        }
        assert!(place(Some(&Near::Node(4096))).is_err());
        assert!(!place(None).unwrap().cores.is_empty());
        assert!(place(Some(&Near::Nic("no-such-nic".into()))).is_err());
        assert!(place(Some(&Near::Gpu(4096))).is_err());
    }

    #[test]
    fn memory_binds_to_a_node_that_exists_only() {
        let nodes = Sys.nodes().unwrap();
        std::thread::spawn(move || {
            assert_eq!(Sys.bind_memory(nodes[0]), Ok(()));
            assert!(Sys.bind_memory(4095).is_err());
        })
        .join()
        .unwrap();
    }

    /// hwloc and the kernel agree on this machine's nodes and their cores.
    #[cfg(feature = "hwloc")]
    #[test]
    fn hwloc_sees_the_cores_sys_sees() {
        let hw = super::super::hwloc::Hwloc::new().unwrap();
        assert_eq!(hw.nodes().unwrap(), Sys.nodes().unwrap());
        for n in Sys.nodes().unwrap() {
            assert_eq!(hw.node_cores(n).unwrap(), Sys.node_cores(n).unwrap(), "node {n}");
        }
        assert!(hw.nic_node("no-such-nic").is_err());
        if let Ok(gpus) = Sys.gpu_node(0) {
            assert_eq!(hw.gpu_node(0).unwrap(), gpus);
        }
    }
}
