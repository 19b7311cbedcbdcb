//! Authentication between role processes with a cluster secret.
//!
//! Roles talk on listeners apart from clients' (the scheduler's, and each
//! frontend's peer listener), and a connection there counts for nothing
//! until both ends have shown they hold the secret. The greeting is a
//! challenge–response in three steps of `Hello` frames:
//!
//! 1. The accepting role (A) sends `Hello { nonce: Na }`, no proof.
//! 2. The connecting role (C) sends, for each role it hosts,
//!    `Hello { role, index, nonce: Nc, proof: P(C, Na, Nc, hello) }`.
//! 3. A checks each proof; after the first good one it answers
//!    `Hello { nonce: Na, proof: P(A, Nc, Na, its hello) }`, which C checks.
//!
//! `P(side, n_checker, n_prover, h)` is HMAC-SHA256 under the secret of a
//! label naming the side, both nonces (the checker's first) and the
//! hello's role, index and clock origin. Each side checks a proof over a
//! nonce it drew itself just now (32 random bytes), so a recorded greeting
//! cannot be replayed, and the labels keep one side's proof from passing
//! for the other's. A connection that sends anything but a good greeting
//! first is closed and counted (`Router::refused_peers`): a client that
//! finds the peer listener can neither inject results nor receive plans.
//!
//! What this does not do: encrypt. Peers on a network others can read or
//! write need the roles' links on a private network (or a tunnel).

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use baton_wire::fb;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a nonce (and of a proof: SHA-256's output).
pub const NONCE_LEN: usize = 32;
/// The shortest secret taken.
pub const MIN_SECRET_LEN: usize = 16;

/// The environment variable holding the secret where no file is named.
pub const SECRET_ENV: &str = "BATON_CLUSTER_SECRET";

/// The cluster's shared secret. Its `Debug` does not show it.
#[derive(Clone)]
pub struct ClusterKey(Arc<[u8]>);

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    TooShort { len: usize },
    Unreadable(String),
    Missing,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::TooShort { len } => {
                write!(f, "the cluster secret has {len} bytes; it needs at least {MIN_SECRET_LEN}")
            }
            KeyError::Unreadable(why) => write!(f, "cannot read the cluster secret: {why}"),
            KeyError::Missing => write!(
                f,
                "role processes authenticate each other with a cluster secret: give --cluster-secret-file FILE \
                 or set {SECRET_ENV} (at least {MIN_SECRET_LEN} bytes, the same for every role)"
            ),
        }
    }
}

impl std::error::Error for KeyError {}

impl ClusterKey {
    pub fn new(secret: &[u8]) -> Result<Self, KeyError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(KeyError::TooShort { len: secret.len() });
        }
        Ok(Self(secret.into()))
    }

    /// The secret in `path`, without the line end an editor leaves.
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let bytes = std::fs::read(path).map_err(|e| KeyError::Unreadable(format!("{}: {e}", path.display())))?;
        Self::new(bytes.trim_ascii_end())
    }

    /// From `path` if given, else from `SECRET_ENV`.
    pub fn from_file_or_env(path: Option<&Path>) -> Result<Self, KeyError> {
        match (path, std::env::var_os(SECRET_ENV)) {
            (Some(p), _) => Self::from_file(p),
            (None, Some(v)) => Self::new(v.as_encoded_bytes()),
            (None, None) => Err(KeyError::Missing),
        }
    }

    fn proof(&self, side: Side, checker: &[u8], prover: &[u8], h: &fb::Hello) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(side.label());
        mac.update(checker);
        mac.update(prover);
        mac.update(&[h.role as u8]);
        mac.update(&h.index.to_le_bytes());
        mac.update(&h.origin_unix_ns.to_le_bytes());
        mac
    }

    /// `h` with `nonce` and the proof of `side` that checks against the
    /// other side's `their_nonce`.
    fn prove(&self, side: Side, their_nonce: &[u8], nonce: &[u8], h: &fb::Hello) -> fb::Hello {
        let proof = self.proof(side, their_nonce, nonce, h).finalize().into_bytes().to_vec();
        fb::Hello { nonce: Some(nonce.to_vec()), proof: Some(proof), ..h.clone() }
    }

    /// Whether `h` proves `side` holds the secret, answering `my_nonce`.
    fn check(&self, side: Side, my_nonce: &[u8], h: &fb::Hello) -> Result<(), AuthError> {
        let (Some(nonce), Some(proof)) = (h.nonce.as_deref(), h.proof.as_deref()) else {
            return Err(AuthError::Unproven);
        };
        if nonce.len() != NONCE_LEN {
            return Err(AuthError::Unproven);
        }
        self.proof(side, my_nonce, nonce, h).verify_slice(proof).map_err(|_| AuthError::WrongProof)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// A greeting without a nonce or proof (or not a greeting at all).
    Unproven,
    /// A proof made with another secret, or for another greeting.
    WrongProof,
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthError::Unproven => "the peer did not prove it holds the cluster secret",
            AuthError::WrongProof => "the peer's proof does not match the cluster secret",
        })
    }
}

impl std::error::Error for AuthError {}

#[derive(Clone, Copy)]
enum Side {
    Acceptor,
    Connector,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Acceptor => b"baton/1 accepting role",
            Side::Connector => b"baton/1 connecting role",
        }
    }
}

fn fresh_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0; NONCE_LEN];
    getrandom::fill(&mut n).expect("the OS has randomness");
    n
}

/// The accepting end of one connection's greeting.
pub struct Challenge {
    key: ClusterKey,
    me: fb::Hello,
    nonce: [u8; NONCE_LEN],
    /// The connecting role's nonce, once one of its greetings checked out.
    theirs: Option<Vec<u8>>,
}

impl Challenge {
    /// A fresh challenge from the role that `me` names.
    pub fn new(key: &ClusterKey, me: fb::Hello) -> Self {
        Self { key: key.clone(), me, nonce: fresh_nonce(), theirs: None }
    }

    /// Step 1: the first frame on the connection.
    pub fn greeting(&self) -> fb::Hello {
        fb::Hello { nonce: Some(self.nonce.to_vec()), proof: None, ..self.me.clone() }
    }

    /// Whether a connecting role's greeting checked out yet.
    pub fn passed(&self) -> bool {
        self.theirs.is_some()
    }

    /// Step 3: checks a connecting role's greeting `h`; the first good one
    /// gets this role's proof to send back. Every greeting on a connection
    /// must carry the same nonce.
    pub fn check(&mut self, h: &fb::Hello) -> Result<Option<fb::Hello>, AuthError> {
        self.key.check(Side::Connector, &self.nonce, h)?;
        let nonce = h.nonce.as_deref().expect("checked");
        match &self.theirs {
            Some(n) if n == nonce => Ok(None),
            Some(_) => Err(AuthError::WrongProof),
            None => {
                self.theirs = Some(nonce.to_vec());
                Ok(Some(self.key.prove(Side::Acceptor, nonce, &self.nonce, &self.me)))
            }
        }
    }
}

/// The connecting end of a greeting: its answer to a challenge.
pub struct Answer {
    key: ClusterKey,
    nonce: [u8; NONCE_LEN],
    /// The accepting role's nonce.
    theirs: Vec<u8>,
}

impl Answer {
    /// Step 2: the greetings answering `challenge`, one per hosted role.
    pub fn new(
        key: &ClusterKey,
        challenge: &fb::Hello,
        mine: &[fb::Hello],
    ) -> Result<(Self, Vec<fb::Hello>), AuthError> {
        let theirs = challenge.nonce.clone().filter(|n| n.len() == NONCE_LEN).ok_or(AuthError::Unproven)?;
        let a = Self { key: key.clone(), nonce: fresh_nonce(), theirs };
        let hellos = mine.iter().map(|h| a.key.prove(Side::Connector, &a.theirs, &a.nonce, h)).collect();
        Ok((a, hellos))
    }

    /// Checks the accepting role's proof, which must come with the nonce
    /// of its challenge.
    pub fn check(&self, reply: &fb::Hello) -> Result<(), AuthError> {
        if reply.nonce.as_deref() != Some(&self.theirs[..]) {
            return Err(AuthError::WrongProof);
        }
        self.key.check(Side::Acceptor, &self.nonce, reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> ClusterKey {
        ClusterKey::new(s.as_bytes()).unwrap()
    }

    fn hello(role: fb::Role, index: u32, origin: u64) -> fb::Hello {
        fb::Hello { role, index, origin_unix_ns: origin, nonce: None, proof: None }
    }

    /// What the accepting side made of the first greeting, and what the
    /// connecting side made of the reply (if there was one).
    type Steps = (Result<Option<fb::Hello>, AuthError>, Option<Result<(), AuthError>>);

    /// Runs the three steps; the connector hosts backends 2 and 3.
    fn greet(a: &ClusterKey, c: &ClusterKey) -> Steps {
        let mut challenge = Challenge::new(a, hello(fb::Role::Scheduler, 0, 77));
        let mine = [hello(fb::Role::Backend, 2, 0), hello(fb::Role::Backend, 3, 0)];
        let (answer, hellos) = Answer::new(c, &challenge.greeting(), &mine).unwrap();
        let first = challenge.check(&hellos[0]);
        let reply = first.clone().ok().flatten().map(|r| answer.check(&r));
        if first.is_ok() {
            assert_eq!(challenge.check(&hellos[1]), Ok(None), "a second role on the connection is let in, unanswered");
        }
        (first, reply)
    }

    #[test]
    fn peers_with_one_secret_greet_each_other() {
        let k = key("sixteen bytes at least");
        let (first, reply) = greet(&k, &k);
        assert_eq!(first.as_ref().unwrap().as_ref().unwrap().origin_unix_ns, 77);
        assert_eq!(reply, Some(Ok(())));
    }

    #[test]
    fn another_secret_fails_on_both_sides() {
        let (a, c) = (key("sixteen bytes at least"), key("sixteen bytes at lEast"));
        assert_eq!(greet(&a, &c).0, Err(AuthError::WrongProof));
        // An impostor accepting with another secret: its reply to a
        // connector's nonce does not pass the connector's check.
        let mut impostor = Challenge::new(&a, hello(fb::Role::Frontend, 1, 0));
        let (answer, _) = Answer::new(&c, &impostor.greeting(), &[hello(fb::Role::Backend, 0, 0)]).unwrap();
        let same_nonce = Answer { key: a.clone(), nonce: answer.nonce, theirs: answer.theirs.clone() };
        let hellos: Vec<_> = [hello(fb::Role::Backend, 0, 0)]
            .iter()
            .map(|h| same_nonce.key.prove(Side::Connector, &same_nonce.theirs, &same_nonce.nonce, h))
            .collect();
        let reply = impostor.check(&hellos[0]).unwrap().unwrap();
        assert_eq!(answer.check(&reply), Err(AuthError::WrongProof));
    }

    #[test]
    fn a_recorded_greeting_does_not_pass_a_new_challenge() {
        let k = key("sixteen bytes at least");
        let old = Challenge::new(&k, hello(fb::Role::Scheduler, 0, 0));
        let (_, recorded) = Answer::new(&k, &old.greeting(), &[hello(fb::Role::Backend, 0, 0)]).unwrap();
        let mut fresh = Challenge::new(&k, hello(fb::Role::Scheduler, 0, 0));
        assert_eq!(fresh.check(&recorded[0]), Err(AuthError::WrongProof));
    }

    #[test]
    fn a_greeting_altered_in_flight_or_unproven_fails() {
        let k = key("sixteen bytes at least");
        let mut challenge = Challenge::new(&k, hello(fb::Role::Scheduler, 0, 0));
        let (_, hellos) = Answer::new(&k, &challenge.greeting(), &[hello(fb::Role::Backend, 0, 0)]).unwrap();
        let other_role = fb::Hello { index: 9, ..hellos[0].clone() };
        assert_eq!(challenge.check(&other_role), Err(AuthError::WrongProof));
        assert_eq!(challenge.check(&hello(fb::Role::Backend, 0, 0)), Err(AuthError::Unproven));
        assert!(!challenge.passed());
        // A connector's own proof sent back as the acceptor's does not pass.
        let (answer, hellos) = Answer::new(&k, &challenge.greeting(), &[hello(fb::Role::Scheduler, 0, 0)]).unwrap();
        let reflected = fb::Hello { nonce: challenge.greeting().nonce, ..hellos[0].clone() };
        assert_eq!(answer.check(&reflected), Err(AuthError::WrongProof));
    }

    #[test]
    fn short_or_missing_secrets_are_refused_with_the_reason() {
        assert_eq!(ClusterKey::new(b"short").unwrap_err(), KeyError::TooShort { len: 5 });
        let dir = std::env::temp_dir().join(format!("baton-key-{}", std::process::id()));
        std::fs::write(&dir, "sixteen bytes at least\n").unwrap();
        assert!(ClusterKey::from_file(&dir).is_ok(), "the line end is not part of the secret");
        std::fs::remove_file(&dir).unwrap();
        assert!(matches!(ClusterKey::from_file(&dir), Err(KeyError::Unreadable(_))));
        assert!(format!("{:?}", key("sixteen bytes at least")) == "ClusterKey(..)");
    }
}
