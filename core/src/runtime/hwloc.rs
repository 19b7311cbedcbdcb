//! hwloc's view of the machine (cargo feature `hwloc`, through
//! hwlocality): NUMA nodes and their cores, the node a PCI GPU or a network
//! interface hangs off (the first non-I/O ancestor's nodeset), and memory
//! binding of the calling thread. See `topology.rs` for what asks.

use hwlocality::memory::binding::{MemoryBindingFlags, MemoryBindingPolicy};
use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::TypeFilter;
use hwlocality::Topology as HwTopology;

use super::topology::{is_nvidia_gpu, Topology};

pub struct Hwloc(HwTopology);

impl Hwloc {
    /// Discovers this machine, PCI devices and OS devices included.
    pub fn new() -> Result<Self, String> {
        let fail = |e: &dyn std::fmt::Display| format!("hwloc: {e}");
        let builder = HwTopology::builder().with_io_type_filter(TypeFilter::KeepImportant).map_err(|e| fail(&e))?;
        builder.build().map(Hwloc).map_err(|e| fail(&e))
    }

    /// The first NUMA node of the object's nearest non-I/O ancestor.
    fn node_of(obj: &TopologyObject) -> Option<usize> {
        let host = obj.first_non_io_ancestor()?;
        host.nodeset()?.first_set().map(usize::from)
    }

    /// Whether the topology has more than one NUMA node; one that has one
    /// says nothing about affinity, as `/sys`'s -1 does not.
    fn numa(&self) -> bool {
        self.0.objects_with_type(ObjectType::NUMANode).count() > 1
    }
}

impl Topology for Hwloc {
    fn name(&self) -> &'static str {
        "hwloc"
    }

    fn nodes(&self) -> Result<Vec<usize>, String> {
        let mut nodes: Vec<usize> =
            self.0.objects_with_type(ObjectType::NUMANode).filter_map(TopologyObject::os_index).collect();
        nodes.sort_unstable();
        Ok(nodes)
    }

    fn node_cores(&self, node: usize) -> Result<Vec<usize>, String> {
        let obj = self
            .0
            .objects_with_type(ObjectType::NUMANode)
            .find(|o| o.os_index() == Some(node))
            .ok_or_else(|| format!("NUMA node {node}: hwloc knows no such node"))?;
        let cpus = obj.cpuset().ok_or_else(|| format!("NUMA node {node}: no cpuset"))?;
        Ok(cpus.iter_set().map(usize::from).collect())
    }

    fn gpu_node(&self, gpu: usize) -> Result<Option<usize>, String> {
        let mut gpus: Vec<(_, u8, u8, u8, &TopologyObject)> = self
            .0
            .pci_devices()
            .filter_map(|o| match o.attributes() {
                Some(ObjectAttributes::PCIDevice(p)) if is_nvidia_gpu(p.vendor_id(), p.class_id()) => {
                    Some((p.domain(), p.bus_id(), p.bus_device(), p.function(), o))
                }
                _ => None,
            })
            .collect();
        gpus.sort_by_key(|g| (g.0, g.1, g.2, g.3));
        let n = gpus.len();
        let obj = gpus.get(gpu).ok_or_else(|| format!("no GPU {gpu}: {n} NVIDIA GPUs on the PCI bus"))?.4;
        Ok(Self::node_of(obj).filter(|_| self.numa()))
    }

    fn nic_node(&self, nic: &str) -> Result<Option<usize>, String> {
        let name = |o: &&TopologyObject| o.name().is_some_and(|n| n.to_bytes() == nic.as_bytes());
        match self.0.os_devices().find(name) {
            Some(obj) => Ok(Self::node_of(obj).filter(|_| self.numa())),
            // hwloc lists network devices on the PCI bus only; a virtual
            // interface is known to the kernel alone.
            None if std::path::Path::new("/sys/class/net").join(nic).exists() && !nic.contains('/') => Ok(None),
            None => Err(format!("no network interface `{nic}`")),
        }
    }

    fn bind_memory(&self, node: usize) -> Result<(), String> {
        let obj = self
            .0
            .objects_with_type(ObjectType::NUMANode)
            .find(|o| o.os_index() == Some(node))
            .ok_or_else(|| format!("NUMA node {node}: hwloc knows no such node"))?;
        let set = obj.nodeset().ok_or_else(|| format!("NUMA node {node}: no nodeset"))?;
        self.0
            .bind_memory(set, MemoryBindingPolicy::Bind, MemoryBindingFlags::THREAD)
            .map_err(|e| format!("hwloc: binding memory to node {node}: {e}"))
    }
}
