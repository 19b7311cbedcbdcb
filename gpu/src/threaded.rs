//! `Threaded`: any executor on a dedicated thread, so that CPU compute runs
//! beside its caller as a GPU does. `launch` hands the batch over (its
//! inputs copied) and returns at once; `poll` says when it is done, with
//! its outputs and the device time the inner executor measured. One batch
//! is in flight at a time (`pipeline_depth` 1). The inner executor is
//! built on its thread, so it need not be `Send`; the thread may be pinned
//! to one core. Once given a waker (`set_waker`), the thread calls it
//! after each batch, so its owner need not poll. Dropping a `Threaded`
//! stops its thread and joins it (after the batch in flight, if any).

use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::executor::{validate, Batch, ExecError, Executor, Launched, ModelInfo, Waker};

/// A batch handed to the thread: owned copies of the inputs (and heads).
struct Job {
    model: u32,
    variant: Option<u16>,
    inputs: Vec<Vec<f32>>,
    heads: Option<Vec<u16>>,
}

type Outcome = Result<(Vec<Vec<f32>>, Duration), ExecError>;

pub struct Threaded {
    infos: Vec<ModelInfo>,
    /// None only while dropping (closing it ends the thread's loop).
    jobs: Option<Sender<Job>>,
    done: Receiver<Outcome>,
    in_flight: bool,
    /// Called by the thread after each batch, once set.
    waker: Arc<OnceLock<Waker>>,
    thread: Option<JoinHandle<()>>,
}

impl Threaded {
    /// Starts a thread named `name`, pinned to CPU core `core` if given,
    /// builds the inner executor there with `build`, and returns once it is
    /// built: its models, or the error `build` gave (or `NoDevice` for a
    /// core this machine does not have, or one the thread could not be
    /// pinned to).
    pub fn spawn<E, F>(name: &str, core: Option<usize>, build: F) -> Result<Self, ExecError>
    where
        E: Executor + 'static,
        F: FnOnce() -> Result<E, ExecError> + Send + 'static,
    {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel::<Outcome>();
        let (ready_tx, ready) = channel::<Result<Vec<ModelInfo>, ExecError>>();
        let waker = Arc::new(OnceLock::<Waker>::new());
        let wake = Arc::clone(&waker);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let inner = pin(core).and_then(|()| build());
                let mut inner = match inner {
                    Ok(e) => {
                        let _ = ready_tx.send(Ok(e.models().to_vec()));
                        e
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let mut outputs = Vec::new();
                while let Ok(job) = job_rx.recv() {
                    let refs: Vec<&[f32]> = job.inputs.iter().map(Vec::as_slice).collect();
                    let heads = job.heads.as_deref();
                    let batch = Batch { model: job.model, variant: job.variant, heads, inputs: &refs };
                    let outcome = inner.run(&batch, &mut outputs).map(|t| (std::mem::take(&mut outputs), t));
                    if done_tx.send(outcome).is_err() {
                        return;
                    }
                    if let Some(w) = wake.get() {
                        w();
                    }
                }
            })
            .map_err(|e| ExecError::Device(format!("cannot start the executor thread: {e}")))?;
        let infos = match ready.recv() {
            Ok(Ok(infos)) => infos,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(ExecError::Device("the executor thread ended while building its models".into()));
            }
        };
        Ok(Self { infos, jobs: Some(jobs), done, in_flight: false, waker, thread: Some(thread) })
    }

    fn gone() -> ExecError {
        ExecError::Device("the executor thread has ended".into())
    }

    /// Waits for the batch in flight.
    fn wait(&mut self, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        self.in_flight = false;
        let (out, t) = self.done.recv().map_err(|_| Self::gone())??;
        *outputs = out;
        Ok(t)
    }
}

/// Pins the calling thread to `core`, if given. The core is looked up
/// among the machine's, not among those the calling thread may run on: a
/// thread spawned from a pinned shard inherits the shard's one core
/// (`core_affinity::get_core_ids` lists only those), and the executor is
/// pinned precisely to get off it.
fn pin(core: Option<usize>) -> Result<(), ExecError> {
    let Some(id) = core else { return Ok(()) };
    // The kernel's affinity masks hold CPU_SETSIZE (1,024) cores; a larger
    // id would index past the mask.
    if id >= 1024 {
        return Err(ExecError::NoDevice(format!("no CPU core {id}")));
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id }) {
        Ok(())
    } else {
        Err(ExecError::NoDevice(format!("cannot pin the executor thread to CPU core {id}")))
    }
}

impl Executor for Threaded {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        self.launch(batch, outputs)?;
        self.wait(outputs)
    }

    /// Validates `batch` here (a bad one is refused at once, never in
    /// flight) and hands a copy of it to the thread; refuses a second batch
    /// while one is in flight.
    fn launch(&mut self, batch: &Batch<'_>, _outputs: &mut Vec<Vec<f32>>) -> Result<Launched, ExecError> {
        if self.in_flight {
            return Err(ExecError::Device("a batch is already in flight (pipeline depth 1): poll it first".into()));
        }
        validate(&self.infos, batch)?;
        let job = Job {
            model: batch.model,
            variant: batch.variant,
            inputs: batch.inputs.iter().map(|x| x.to_vec()).collect(),
            heads: batch.heads.map(<[u16]>::to_vec),
        };
        self.jobs.as_ref().ok_or_else(Self::gone)?.send(job).map_err(|_| Self::gone())?;
        self.in_flight = true;
        Ok(Launched::InFlight)
    }

    fn poll(&mut self, outputs: &mut Vec<Vec<f32>>) -> Option<Result<Duration, ExecError>> {
        if !self.in_flight {
            return None;
        }
        match self.done.try_recv() {
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.in_flight = false;
                Some(Err(Self::gone()))
            }
            Ok(outcome) => {
                self.in_flight = false;
                Some(outcome.map(|(out, t)| {
                    *outputs = out;
                    t
                }))
            }
        }
    }

    fn pipeline_depth(&self) -> usize {
        1
    }

    fn set_waker(&mut self, wake: Waker) -> bool {
        // A second waker is refused: the first keeps being called.
        self.waker.set(wake).is_ok()
    }
}

impl Drop for Threaded {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::emulated::{Emulated, EmulatedModel, Pacing};
    use crate::reference::ReferenceModels;

    fn spinning(ms: u64) -> Result<Emulated, ExecError> {
        let info = ModelInfo::fixed("slow", 2, 1, 4);
        let latency = (1..=4).map(|b| Duration::from_millis(ms * b)).collect();
        Ok(Emulated::new(vec![EmulatedModel::fixed(info, latency)], 0.0, 1).with_pacing(Pacing::Spin))
    }

    #[test]
    fn the_reference_models_conform_through_a_thread() {
        let mut t = Threaded::spawn("ref", None, || Ok(ReferenceModels::small(7))).unwrap();
        assert_eq!(t.models(), ReferenceModels::small(7).models());
        crate::conformance::check(&mut t, "threaded");
    }

    #[test]
    fn a_launched_batch_is_polled_to_its_outputs_and_time() {
        // The inner executor runs a batch only when the test opens its gate,
        // so what is checked does not depend on timing.
        struct Gated {
            gate: Receiver<()>,
            infos: Vec<ModelInfo>,
        }
        impl Executor for Gated {
            fn models(&self) -> &[ModelInfo] {
                &self.infos
            }
            fn run(&mut self, batch: &Batch<'_>, out: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
                self.gate.recv().map_err(|_| ExecError::Device("gate closed".into()))?;
                *out = batch.inputs.iter().map(|x| vec![x.iter().sum()]).collect();
                Ok(Duration::from_millis(7))
            }
        }
        let (open, gate) = channel::<()>();
        let infos = vec![ModelInfo::fixed("gated", 2, 1, 4)];
        let mut t = Threaded::spawn("gated", None, move || Ok(Gated { gate, infos })).unwrap();
        let (x, mut out) = ([1.0f32, 2.0], Vec::new());
        let batch = Batch { model: 0, variant: None, heads: None, inputs: &[&x, &x] };
        assert_eq!(t.launch(&batch, &mut out), Ok(Launched::InFlight), "launch returns with the batch held");
        assert!(t.poll(&mut out).is_none(), "not done while its gate is shut");
        assert!(matches!(t.launch(&batch, &mut out), Err(ExecError::Device(_))), "a second batch in flight");
        open.send(()).unwrap();
        let took = loop {
            if let Some(r) = t.poll(&mut out) {
                break r.unwrap();
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(took, Duration::from_millis(7), "the inner executor's device time");
        assert_eq!(out, vec![vec![3.0], vec![3.0]]);
        assert!(t.poll(&mut out).is_none(), "nothing left in flight");
        // A bad batch is refused at launch, and the next runs.
        let bad = Batch { model: 1, variant: None, heads: None, inputs: &[&x] };
        assert_eq!(t.launch(&bad, &mut out), Err(ExecError::UnknownModel { model: 1 }));
        open.send(()).unwrap();
        assert!(t.run(&batch, &mut out).is_ok());
        // Dropping with a batch in flight finishes it and joins the thread.
        t.launch(&batch, &mut out).unwrap();
        open.send(()).unwrap();
        drop(t);
    }

    #[test]
    fn a_waker_is_called_once_per_finished_batch_and_polling_then_finds_it() {
        let mut t = Threaded::spawn("woken", None, || spinning(5)).unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(8);
        assert!(t.set_waker(Arc::new(move || tx.send(()).unwrap())));
        assert!(!t.set_waker(Arc::new(|| {})), "one waker");
        let (x, mut out) = ([1.0f32, 2.0], Vec::new());
        let batch = Batch { model: 0, variant: None, heads: None, inputs: &[&x] };
        for _ in 0..3 {
            t.launch(&batch, &mut out).unwrap();
            rx.recv_timeout(Duration::from_secs(60)).expect("woken when done");
            assert!(matches!(t.poll(&mut out), Some(Ok(_))), "done once woken");
        }
        assert!(rx.try_recv().is_err(), "one wake per batch");
    }

    #[test]
    fn a_thread_pinned_elsewhere_can_pin_its_executor_to_another_core() {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let (Some(&first), Some(&last)) = (cores.first(), cores.last()) else { return };
        // As a shard does: the spawning thread runs on one core only.
        let spawned = std::thread::spawn(move || {
            assert!(core_affinity::set_for_current(first));
            Threaded::spawn("elsewhere", Some(last.id), || spinning(1)).map(drop)
        });
        assert_eq!(spawned.join().expect("no panic"), Ok(()));
    }

    #[test]
    fn a_failed_build_is_the_constructors_error() {
        let r =
            Threaded::spawn("fails", None, || -> Result<Emulated, ExecError> { Err(ExecError::NoDevice("no".into())) });
        assert_eq!(r.err(), Some(ExecError::NoDevice("no".into())));
        let r = Threaded::spawn("nowhere", Some(1 << 20), || spinning(1));
        assert!(matches!(r, Err(ExecError::NoDevice(_))), "{:?}", r.err());
        let pinned = Threaded::spawn("pinned", Some(0), || spinning(1));
        assert!(pinned.is_ok(), "{:?}", pinned.err());
    }
}
