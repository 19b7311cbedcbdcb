//! Multi-model queries through the three roles: one answer per query,
//! with every stage's outputs or one typed failure naming its stage.

use baton_wire::fb;

use super::*;

/// A detector forks to cars (about 2 a frame) and faces (about half a
/// frame); a ranker joins them. `car_alpha_ms` sets how slow the car
/// recogniser is.
fn fork_join(car_alpha_ms: f64) -> String {
    format!(
        r#"
name = "fj"
seed = 3
[cluster]
gpus = 2
[[models]]
name = "det"
alpha_ms = 1.0
beta_ms = 2.0
[[models]]
name = "car"
alpha_ms = {car_alpha_ms}
beta_ms = 1.0
[[models]]
name = "face"
alpha_ms = 0.5
beta_ms = 1.0
[[models]]
name = "rank"
alpha_ms = 0.5
beta_ms = 1.0
[[queries]]
name = "frames"
slo_ms = 300.0
[[queries.stages]]
model = "det"
[[queries.stages]]
model = "car"
parent = "det"
gamma = 2.0
[[queries.stages]]
model = "face"
parent = "det"
gamma = 0.5
[[queries.stages]]
model = "rank"
parents = ["car", "face"]
gamma = 1.0
"#
    )
}

fn query(id: u64) -> fb::InferRequest {
    fb::InferRequest {
        model: None,
        query: Some("frames".into()),
        ..request(id, "", 300.0, &[id as f32, 1.0, 2.0, 3.0])
    }
}

/// `n` queries, 5 ms apart.
fn queries(n: u64) -> VecDeque<(Nanos, fb::InferRequest)> {
    (0..n).map(|i| (i * 5_000_000, query(i))).collect()
}

fn outputs_of(a: &fb::InferResponse, model: &str) -> usize {
    a.outputs.as_deref().unwrap_or(&[]).iter().filter(|t| t.name.as_deref() == Some(model)).count()
}

/// Every query gets one answer carrying each stage's outputs: one
/// detection, cars and faces as its fan-out said (about gamma per frame
/// over many frames), and the ranker's (its join fires once a frame, for
/// Poisson(1) requests); nothing is held afterwards.
#[test]
fn every_query_is_answered_once_with_every_stages_outputs() {
    let mut c = Cluster::of(&fork_join(0.5), PolicyKind::Clockwork, 1 << 20);
    let n = 400;
    c.run(queries(n));
    assert_eq!(c.answers.len() as u64, n);
    let mut ids: Vec<u64> = c.answers.iter().map(|a| a.1.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "one answer per query");
    let (mut cars, mut faces, mut ranks) = (0, 0, 0);
    for (_, a) in &c.answers {
        assert_eq!(a.status, fb::Status::Ok, "{a:?}");
        assert_eq!(outputs_of(a, "det"), 1, "{a:?}");
        cars += outputs_of(a, "car");
        faces += outputs_of(a, "face");
        ranks += outputs_of(a, "rank");
        // Outputs in stage order: the detection first, rankings last.
        let names: Vec<&str> = a.outputs.as_deref().unwrap().iter().map(|t| t.name.as_deref().unwrap()).collect();
        let order = ["det", "car", "face", "rank"];
        let stage = |m: &str| order.iter().position(|&x| x == m).unwrap();
        assert!(names.windows(2).all(|w| stage(w[0]) <= stage(w[1])), "{names:?}");
    }
    let per = |x: usize| x as f64 / n as f64;
    let (cars, faces, ranks) = (per(cars), per(faces), per(ranks));
    assert!((cars - 2.0).abs() < 0.3 && (faces - 0.5).abs() < 0.15, "fan-out {cars} cars, {faces} faces a frame");
    assert!((ranks - 1.0).abs() < 0.2, "{ranks} rankings a frame");
    assert_eq!((c.fe.held(), c.fe.queries()), (0, 0));
    assert_eq!((c.fe.stats.ok, c.fe.stats.received), (n, n));
}

/// A car recogniser too slow for the cars of a frame every 5 ms (its
/// batches take 150 ms and more): cars are dropped or late, and detections
/// queue behind car batches. Each failed frame gets one answer naming the
/// stage that missed and carrying no outputs; most name `car`.
#[test]
fn a_stage_that_misses_fails_its_query_once_naming_the_stage() {
    let mut c = Cluster::of(&fork_join(150.0), PolicyKind::Clockwork, 1 << 20);
    let n = 200;
    c.run(queries(n));
    assert_eq!(c.answers.len() as u64, n);
    let (mut ok, mut by_stage) = (0, std::collections::BTreeMap::<String, u64>::new());
    for (_, a) in &c.answers {
        match a.status {
            fb::Status::Ok => ok += 1,
            fb::Status::Dropped => {
                let stage = a.stage.clone().expect("a failed query names its stage");
                assert!(["det", "car", "face", "rank"].contains(&stage.as_str()), "{a:?}");
                assert!(a.outputs.is_none(), "a failure carries no outputs");
                *by_stage.entry(stage).or_default() += 1;
            }
            fb::Status::Error => panic!("{a:?}"),
        }
    }
    let failed: u64 = by_stage.values().sum();
    assert!(failed > n / 2 && by_stage["car"] > failed / 2, "{ok} ok, failed by stage {by_stage:?}");
    assert_eq!((c.fe.held(), c.fe.queries()), (0, 0));
    assert_eq!(c.fe.stats.answered(), n);
}

/// Bad query requests are refused with typed errors: an unknown query, a
/// model named beside a query, the wrong input size for the root model.
#[test]
fn bad_query_requests_get_typed_errors() {
    let mut c = Cluster::of(&fork_join(0.5), PolicyKind::Clockwork, 1 << 20);
    let unknown = fb::InferRequest { query: Some("nope".into()), ..query(0) };
    let both = fb::InferRequest { model: Some("det".into()), ..query(1) };
    let short = fb::InferRequest { query: Some("frames".into()), model: None, ..request(2, "", 300.0, &[1.0]) };
    c.run([(0, unknown), (0, both), (0, short), (0, query(3))].into());
    let code = |id: u64| c.answers.iter().find(|a| a.1.id == id).map(|a| (a.1.status, a.1.error_code));
    assert_eq!(code(0), Some((fb::Status::Error, fb::ErrorCode::UnknownQuery)));
    assert_eq!(code(1), Some((fb::Status::Error, fb::ErrorCode::UnknownQuery)));
    assert_eq!(code(2), Some((fb::Status::Error, fb::ErrorCode::BadTensor)));
    assert_eq!(code(3).map(|c| c.0), Some(fb::Status::Ok));
}
