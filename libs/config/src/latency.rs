//! Latency profiles: delays drawn per request on top of the real stores, so a benchmark on one
//! machine shows what an object store and a metadata store a zone away would add. For
//! benchmarks only (`lakelog standalone --latency-profile`, `lakelog bench`); never a role's
//! config.

use std::time::Duration;

/// The spread of one kind of request's latency: log-normal with this median and 99th
/// percentile (the long right tail object stores show), plus the bytes moved at `bytes_per_s`
/// (0: no transfer time).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub p50: Duration,
    pub p99: Duration,
    pub bytes_per_s: u64,
}

/// The standard normal's 99th percentile.
const Z99: f64 = 2.326_347_874;

impl Spread {
    /// The first-byte delay for two uniform draws in [0, 1) (Box–Muller).
    pub fn draw(&self, u1: f64, u2: f64) -> Duration {
        let p50 = self.p50.as_secs_f64();
        if p50 <= 0.0 {
            return Duration::ZERO;
        }
        let sigma = (self.p99.as_secs_f64() / p50).max(1.0).ln() / Z99;
        let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        // Capped at a minute: the tail of a log-normal is unbounded, a benchmark's is not.
        Duration::from_secs_f64((p50 * (sigma * z).exp()).min(60.0))
    }

    /// The time `bytes` take at `bytes_per_s`.
    pub fn transfer(&self, bytes: u64) -> Duration {
        match self.bytes_per_s {
            0 => Duration::ZERO,
            rate => Duration::from_secs_f64(bytes as f64 / rate as f64),
        }
    }
}

/// A named pair of spreads: the object store's requests and the metadata store's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyProfile {
    pub name: &'static str,
    pub objects: Spread,
    pub metadata: Spread,
}

/// etcd a zone away: a commit is about one cross-zone round trip.
const CROSS_ZONE_ETCD: Spread =
    Spread { p50: Duration::from_millis(2), p99: Duration::from_millis(4), bytes_per_s: 0 };

/// The profiles `--latency-profile` names.
pub const PROFILES: [LatencyProfile; 2] = [
    // S3 Standard: first byte p50 ≈ 25 ms, p99 ≈ 120 ms, then about 100 MB/s a request.
    LatencyProfile {
        name: "s3-standard",
        objects: Spread {
            p50: Duration::from_millis(25),
            p99: Duration::from_millis(120),
            bytes_per_s: 100_000_000,
        },
        metadata: CROSS_ZONE_ETCD,
    },
    // S3 Express One Zone: p50 ≈ 5 ms, p99 ≈ 15 ms.
    LatencyProfile {
        name: "s3-express",
        objects: Spread {
            p50: Duration::from_millis(5),
            p99: Duration::from_millis(15),
            bytes_per_s: 100_000_000,
        },
        metadata: CROSS_ZONE_ETCD,
    },
];

impl LatencyProfile {
    /// The profile called `name`, or an error naming the ones there are.
    pub fn named(name: &str) -> Result<LatencyProfile, String> {
        PROFILES.iter().find(|p| p.name == name).copied().ok_or_else(|| {
            let names: Vec<_> = PROFILES.iter().map(|p| p.name).collect();
            format!("latency profile `{name}`: not one of {}", names.join(", "))
        })
    }
}

/// Uniform draws in [0, 1): splitmix64, seeded, the same on every machine.
#[derive(Debug, Clone)]
pub struct Draws(u64);

impl Draws {
    pub fn new(seed: u64) -> Draws {
        Draws(seed)
    }

    pub fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One first-byte delay of `spread`.
    pub fn delay(&mut self, spread: &Spread) -> Duration {
        let (u1, u2) = (self.uniform(), self.uniform());
        spread.draw(u1, u2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The drawn delays have the profile's median and 99th percentile (within 10% over
    /// 100,000 draws), and the transfer time is linear in the bytes.
    #[test]
    fn drawn_delays_have_the_profiles_percentiles() {
        for p in PROFILES {
            let mut d = Draws::new(7);
            let mut xs: Vec<Duration> = (0..100_000).map(|_| d.delay(&p.objects)).collect();
            xs.sort_unstable();
            let near = |got: Duration, want: Duration| {
                (got.as_secs_f64() / want.as_secs_f64() - 1.0).abs() < 0.1
            };
            assert!(near(xs[50_000], p.objects.p50), "{}: p50 {:?}", p.name, xs[50_000]);
            assert!(near(xs[99_000], p.objects.p99), "{}: p99 {:?}", p.name, xs[99_000]);
            assert_eq!(p.objects.transfer(10_000_000), Duration::from_millis(100));
        }
        assert!(LatencyProfile::named("s3-express").is_ok());
        let err = LatencyProfile::named("s4").err().unwrap_or_default();
        assert!(err.contains("s3-standard, s3-express"), "{err}");
    }
}
