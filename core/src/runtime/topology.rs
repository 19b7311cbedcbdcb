//! Which cores the shards are pinned to. Operators pin a deployment to a
//! NUMA node (`EngineConfig::numa_node`): its cores come from the kernel's
//! topology (`/sys/devices/system/node/nodeN/cpulist`), intersected with
//! the cores this process may run on (core_affinity). hwloc would give the
//! same list on Linux but needs a system library the default build does
//! not assume.

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

/// The cores to pin shards to, in order: those of `numa_node` (all the
/// process may use when None) that the process may run on.
pub fn cores(numa_node: Option<usize>) -> Result<Vec<usize>, String> {
    let allowed: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
    let Some(node) = numa_node else {
        return Ok(if allowed.is_empty() { vec![0] } else { allowed });
    };
    let path = format!("/sys/devices/system/node/node{node}/cpulist");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("NUMA node {node}: {path}: {e}"))?;
    let cpus: Vec<usize> =
        parse_cpulist(&text)?.into_iter().filter(|c| allowed.is_empty() || allowed.contains(c)).collect();
    if cpus.is_empty() {
        return Err(format!("NUMA node {node} has no core this process may run on"));
    }
    Ok(cpus)
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
        if std::path::Path::new("/sys/devices/system/node/node0").exists() {
            assert!(!cores(Some(0)).unwrap().is_empty());
        }
        assert!(cores(Some(4096)).is_err());
        assert!(!cores(None).unwrap().is_empty());
    }
}
