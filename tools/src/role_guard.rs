//! A role process that does not outlive whoever started it. Stopping it
//! on purpose is `shutdown`, as for the process itself (a backend leaves
//! its scheduler first). Dropped while it still runs — an error returned
//! early, a panic — it is killed (`RoleProcess::kill`: a backend stops
//! without leaving, as if its process died) and waited for, so that an
//! error path leaves no role serving behind it.
//!
//! Not handled: a role whose own shard panicked makes the wait panic too;
//! in a drop during a panic that aborts the process, which then ends
//! anyway.

use std::ops::Deref;

use baton_core::runtime::{EngineReport, RoleProcess};

/// A started role process, killed when dropped (module doc).
pub struct RoleGuard(Option<RoleProcess>);

impl RoleGuard {
    pub fn new(process: RoleProcess) -> Self {
        Self(Some(process))
    }

    /// Stops the role in order (`RoleProcess::shutdown`) and gives its report.
    pub fn shutdown(mut self) -> EngineReport {
        self.0.take().expect("a guard holds its process until it is shut down or dropped").shutdown()
    }
}

impl Deref for RoleGuard {
    type Target = RoleProcess;

    fn deref(&self) -> &RoleProcess {
        self.0.as_ref().expect("a guard holds its process until it is shut down or dropped")
    }
}

impl Drop for RoleGuard {
    fn drop(&mut self) {
        if let Some(process) = self.0.take() {
            // Its report is of a run that failed: nobody reads it.
            let _ = process.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;

    use baton_core::runtime::auth::ClusterKey;
    use baton_core::runtime::{start_role, EngineConfig, RoleSpec};
    use baton_sched::Scenario;

    use super::*;

    fn scheduler() -> RoleGuard {
        let s = Scenario::parse(include_str!("../scenarios/serve-default.toml")).expect("the scenario parses");
        let key = ClusterKey::new(b"the role guard test's own secret").expect("long enough");
        let cfg = EngineConfig { cluster_key: Some(key), ..EngineConfig::default() };
        let listen = "127.0.0.1:0".parse().expect("an address");
        RoleGuard::new(start_role(&s, s.policy, &cfg, RoleSpec::Scheduler { listen }).expect("a scheduler starts"))
    }

    /// Dropped, a guard kills its role and waits for it: nothing listens
    /// where the role did. Shut down, it gives the role's report.
    #[test]
    fn a_dropped_guard_stops_its_role_and_a_shut_down_one_reports() {
        let guard = scheduler();
        let addr = guard.addr.expect("a scheduler listens");
        drop(TcpStream::connect(addr).expect("the scheduler accepts"));
        drop(guard);
        assert!(TcpStream::connect(addr).is_err(), "{addr} still listens");
        let report = scheduler().shutdown();
        assert_eq!(report.scheduler.requests, 0);
    }
}
