//! Decayed usage per queue, the memory behind fair share.
//!
//! The caller keeps a ledger across cycles and records GPU-seconds as work
//! runs; the engine reads it, decayed to the cycle's time. Usage halves every
//! `half_life` seconds, so what a queue used yesterday weighs less than what
//! it used an hour ago.

use std::collections::BTreeMap;

/// Decayed GPU-seconds per queue and GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageLedger {
    half_life: i64,
    at: i64,
    gpu_seconds: BTreeMap<String, BTreeMap<String, f64>>,
}

impl UsageLedger {
    /// An empty ledger whose usage halves every `half_life` seconds.
    pub fn new(half_life: i64) -> Self {
        Self {
            half_life: half_life.max(1),
            at: 0,
            gpu_seconds: BTreeMap::new(),
        }
    }

    /// The half-life in seconds.
    pub fn half_life(&self) -> i64 {
        self.half_life
    }

    fn factor(&self, from: i64, to: i64) -> f64 {
        let elapsed = to.saturating_sub(from).max(0) as f64;
        0.5_f64.powf(elapsed / self.half_life as f64)
    }

    /// Adds `gpu_seconds` of `model` used by `queue`, recorded at `at`.
    /// Records must come in time order; an earlier time counts as `at` of
    /// the last record.
    pub fn record(&mut self, queue: &str, model: &str, gpu_seconds: f64, at: i64) {
        if at > self.at {
            let factor = self.factor(self.at, at);
            for models in self.gpu_seconds.values_mut() {
                for value in models.values_mut() {
                    *value *= factor;
                }
            }
            self.at = at;
        }
        *self
            .gpu_seconds
            .entry(queue.to_owned())
            .or_default()
            .entry(model.to_owned())
            .or_default() += gpu_seconds.max(0.0);
    }

    /// The decayed GPU-seconds of `model` used by `queue`, as seen at `now`.
    pub fn decayed(&self, queue: &str, model: &str, now: i64) -> f64 {
        self.gpu_seconds
            .get(queue)
            .and_then(|models| models.get(model))
            .map_or(0.0, |value| value * self.factor(self.at, now))
    }

    /// Every model `queue` has usage of.
    pub(crate) fn models_of<'a>(&'a self, queue: &str) -> impl Iterator<Item = &'a str> + 'a {
        self.gpu_seconds
            .get(queue)
            .into_iter()
            .flat_map(|models| models.keys().map(String::as_str))
    }
}

impl Default for UsageLedger {
    /// A ledger with a one-day half-life.
    fn default() -> Self {
        Self::new(86_400)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_halves_every_half_life() {
        let mut ledger = UsageLedger::new(3_600);
        ledger.record("a", "H100", 1_000.0, 0);
        assert!((ledger.decayed("a", "H100", 3_600) - 500.0).abs() < 1e-9);
        ledger.record("a", "H100", 500.0, 7_200);
        assert!((ledger.decayed("a", "H100", 7_200) - 750.0).abs() < 1e-9);
        assert_eq!(ledger.decayed("b", "H100", 7_200), 0.0);
    }
}
