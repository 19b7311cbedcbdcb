//! Follows the autoscaler's advice with backend processes: one process per
//! GPU, started when the scheduler advises more GPUs (it joins when it
//! connects) and the newest stopped when it advises fewer (it leaves
//! without losing a request: `baton_core::roles::backend`). What an
//! operator does with `baton scheduler --autoscale-period`'s log lines,
//! for tests and harnesses that start roles in process.

use baton_core::runtime::{EngineReport, RoleProcess};

pub struct Supervisor<F: FnMut(u32) -> RoleProcess> {
    /// Starts the process of backend `b` (one GPU).
    start: F,
    /// Processes serving, backend 0 first.
    pub serving: Vec<RoleProcess>,
    /// The reports of those that left.
    pub left: Vec<EngineReport>,
    /// The most serving at once.
    pub most: usize,
}

impl<F: FnMut(u32) -> RoleProcess> Supervisor<F> {
    /// Starts `initial` backend processes.
    pub fn new(initial: usize, mut start: F) -> Self {
        let serving: Vec<RoleProcess> = (0..initial as u32).map(&mut start).collect();
        Self { start, most: serving.len(), serving, left: Vec::new() }
    }

    /// Makes `gpus` processes serve: starts the next, or stops the newest.
    pub fn follow(&mut self, gpus: usize) {
        while self.serving.len() < gpus {
            let p = (self.start)(self.serving.len() as u32);
            self.serving.push(p);
        }
        while self.serving.len() > gpus {
            let p = self.serving.pop().expect("more than asked for");
            self.left.push(p.shutdown());
        }
        self.most = self.most.max(self.serving.len());
    }

    /// Stops every process still serving; their reports.
    pub fn stop(self) -> Vec<EngineReport> {
        self.serving.into_iter().map(RoleProcess::shutdown).collect()
    }
}

/// What an autoscaled engine run gave.
pub struct AutoscaledRun {
    /// The load as the client saw it.
    pub load: crate::load::LoadReport,
    /// Each period's signals and advice, as the scheduler gave them.
    pub advice: Vec<baton_core::roles::autoscaling::Advice>,
    pub most: usize,
    /// Reports of the backend processes that left during the run, and of
    /// those serving at its end.
    pub left: Vec<EngineReport>,
    pub last: Vec<EngineReport>,
    pub frontend: EngineReport,
}

/// Serves `s` with its roles as processes in this one (`cfg` with a
/// cluster key): a scheduler under Symphony's autoscaler `scaling`, one
/// frontend, and `scaling.initial` one-GPU backend processes that a
/// `Supervisor` grows and shrinks with the advice, under `load` (its
/// target is set here).
pub fn run_autoscaled(
    s: &baton_sched::Scenario,
    cfg: &baton_core::runtime::EngineConfig,
    scaling: baton_sched::autoscale::AutoscaleConfig,
    mut load: crate::load::LoadConfig,
) -> Result<AutoscaledRun, String> {
    use baton_core::roles::autoscaling::{Advice, AdviceSink};
    use baton_core::runtime::{start_role, EngineConfig, RoleSpec};
    use std::sync::{Arc, Mutex};
    let advice: Arc<Mutex<Vec<Advice>>> = Arc::default();
    let sink = {
        let advice = Arc::clone(&advice);
        AdviceSink(Arc::new(move |a: &Advice| advice.lock().expect("not poisoned").push(*a)))
    };
    let policy = baton_sched::PolicyKind::Symphony;
    let any = "127.0.0.1:0".parse().expect("an address");
    let role = |cfg: &EngineConfig, spec| start_role(s, policy, cfg, spec).map_err(|e| e.to_string());
    let sched_cfg = EngineConfig { autoscale: Some((scaling, sink)), ..cfg.clone() };
    let sched = role(&sched_cfg, RoleSpec::Scheduler { listen: any })?;
    let scheduler = sched.addr.expect("a scheduler listens");
    let fe = role(cfg, RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers: vec![scheduler] })?;
    let frontends = vec![fe.peer_addr.expect("a frontend listens for backends")];
    let gpu = |b| {
        let spec = RoleSpec::Backends { first: b, count: 1, scheduler, frontends: frontends.clone() };
        role(cfg, spec).expect("a backend process starts")
    };
    let mut sup = Supervisor::new(scaling.initial, gpu);
    load.targets = vec![fe.addr.expect("a frontend listens for clients")];
    let run = {
        let s = s.clone();
        std::thread::spawn(move || crate::load::run(&s, &load))
    };
    while !run.is_finished() {
        let advised = advice.lock().expect("not poisoned").last().map(|a| a.gpus);
        sup.follow(advised.unwrap_or(sup.serving.len()));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let load = run.join().map_err(|_| "the load generator panicked")?.map_err(|e| e.to_string())?;
    let frontend = fe.shutdown();
    let (most, left) = (sup.most, std::mem::take(&mut sup.left));
    let last = sup.stop();
    sched.shutdown();
    let advice = advice.lock().expect("not poisoned").clone();
    Ok(AutoscaledRun { load, advice, most, left, last, frontend })
}
