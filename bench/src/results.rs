//! Everything one run measured, and the ratios derived from it: each ratio is taken
//! per repetition (fencelock and its baseline measured back to back), then summarised
//! as median and min–max.

use crate::measure::contender::{Lock, Mode};
use crate::measure::contention::ContentionResult;
use crate::measure::machine::Machine;
use crate::measure::memory::MemoryResult;
use crate::measure::natives::Natives;
use crate::measure::profile::ProfileResult;
use crate::measure::throughput::GroupResult;
use crate::settings::Settings;
use crate::stats::{spread, Spread};

pub struct Results {
    pub machine: Machine,
    pub settings: Settings,
    pub started_unix: u64,
    pub elapsed_s: f64,
    pub throughput: Vec<GroupResult>,
    pub contention: Vec<ContentionResult>,
    pub memory: MemoryResult,
    pub natives: Natives,
    pub profile: ProfileResult,
}

/// fencelock's rate over one baseline's, per repetition.
#[derive(Debug, Clone)]
pub struct Ratio {
    pub group: &'static str,
    pub depth: usize,
    pub fencelock: &'static str,
    pub baseline: &'static str,
    pub samples: Vec<f64>,
    pub spread: Spread,
}

impl Ratio {
    pub fn mode(&self) -> &'static str {
        if self.depth > 1 {
            "pipelined"
        } else {
            "unpipelined"
        }
    }
}

fn paired(numerator: &[f64], denominator: &[f64]) -> Vec<f64> {
    numerator
        .iter()
        .zip(denominator)
        .map(|(n, d)| n / d)
        .collect()
}

impl Results {
    pub fn ratios(&self) -> Vec<Ratio> {
        let mut ratios = Vec::new();
        for group in &self.throughput {
            let Some((ours, baselines)) = group.series.split_first() else {
                continue;
            };
            for baseline in baselines {
                let samples = paired(&ours.samples, &baseline.samples);
                ratios.push(Ratio {
                    group: group.id,
                    depth: group.depth,
                    fencelock: ours.label,
                    baseline: baseline.label,
                    spread: spread(&samples),
                    samples,
                });
            }
        }
        ratios
    }

    pub fn ratio(&self, group: &str, pipelined: bool, baseline: &str) -> Option<Ratio> {
        self.ratios()
            .into_iter()
            .find(|r| r.group == group && (r.depth > 1) == pipelined && r.baseline == baseline)
    }

    pub fn contention(&self, lock: Lock, clients: usize, mode: Mode) -> Option<&ContentionResult> {
        self.contention
            .iter()
            .find(|c| c.lock == lock && c.clients == clients && c.mode == mode)
    }

    /// Per-repetition `f(numerator) / f(denominator)` for one lock and client count.
    pub fn contention_ratio(
        &self,
        lock: Lock,
        clients: usize,
        numerator: Mode,
        denominator: Mode,
        f: impl Fn(&crate::measure::contention::Sample) -> f64,
    ) -> Option<Vec<f64>> {
        let top = self.contention(lock, clients, numerator)?;
        let bottom = self.contention(lock, clients, denominator)?;
        let top: Vec<f64> = top.samples.iter().map(&f).collect();
        let bottom: Vec<f64> = bottom.samples.iter().map(&f).collect();
        Some(paired(&top, &bottom))
    }
}
