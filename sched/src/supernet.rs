//! Supernets (SuperServe): one weight-shared network whose pareto-optimal
//! subnets trade accuracy for latency. A scenario lists its subnets
//! (`[[models.subnets]]`) or takes the built-in default (`supernet =
//! "default"`).
//!
//! The default has 12 pareto points from 73% to 80% top-1 accuracy whose
//! latency grows with accuracy and with batch size, and whose batch cost
//! grows faster for the more accurate subnets — the three properties
//! SlackFit relies on (SuperServe section 4.2, P1–P3; the shape of its
//! Figure 6a). With x = i/11 for subnet i:
//!
//! ```text
//! accuracy = 73 + 7x %          l(b) = (0.25 + 1.5x²) b + (1.5 + 2.5x)  ms
//! ```

use crate::profile::{Profile, ProfileError};
use crate::types::Subnet;

pub const DEFAULT_SUBNETS: usize = 12;

pub fn default_supernet(max_batch: u32) -> Result<Vec<Subnet>, ProfileError> {
    (0..DEFAULT_SUBNETS)
        .map(|i| {
            let x = i as f64 / (DEFAULT_SUBNETS - 1) as f64;
            Ok(Subnet {
                name: format!("subnet-{i:02}"),
                accuracy: 73.0 + 7.0 * x,
                profile: Profile::linear_ms(0.25 + 1.5 * x * x, 1.5 + 2.5 * x, max_batch)?,
            })
        })
        .collect()
}

/// Checks a subnet list is a pareto front: accuracy ascending, and latency
/// at every batch size never falling as accuracy rises. Returns the index
/// of the first subnet that breaks it.
pub fn check_pareto(subnets: &[Subnet]) -> Result<(), usize> {
    for i in 1..subnets.len() {
        let (a, b) = (&subnets[i - 1], &subnets[i]);
        let cap = a.profile.max_batch().min(b.profile.max_batch());
        if b.accuracy < a.accuracy || (1..=cap).any(|x| b.profile.latency(x) < a.profile.latency(x)) {
            return Err(i);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_has_slackfits_properties() {
        let s = default_supernet(32).unwrap();
        assert_eq!(s.len(), DEFAULT_SUBNETS);
        assert!((s[0].accuracy - 73.0).abs() < 1e-9 && (s[11].accuracy - 80.0).abs() < 1e-9);
        assert_eq!(check_pareto(&s), Ok(()));
        // P3: the cost of a larger batch grows with accuracy.
        let spread = |x: &Subnet| x.profile.latency(32) - x.profile.latency(1);
        assert!(s.windows(2).all(|w| spread(&w[1]) >= spread(&w[0])));
        let mut broken = s.clone();
        broken.swap(3, 4);
        assert_eq!(check_pareto(&broken), Err(4));
    }
}
