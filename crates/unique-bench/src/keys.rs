//! How each request picks its key: random users of a large base (the default), a fixed set
//! of keys, or a hot set taking most of the load.

use std::str::FromStr;

/// The user base of `--keys random`: uids `1..=10^8`.
pub(crate) const RANDOM_USERS: u64 = 100_000_000;

/// `--keys`: random users of [`RANDOM_USERS`], or a fixed set of `1..=n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// Uniform over `1..=10^8`, a fresh sequence every round: nearly every claim is a first
    /// login, as when real users log in.
    Random,
    /// Uids `1..=n`, the same sequence every round: after the warm-up every claim logs in a
    /// key seen before (with 10 000 keys, the hot-key workload).
    Count(u64),
}

impl FromStr for Keys {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "random" {
            return Ok(Keys::Random);
        }
        match text.replace('_', "").parse::<u64>() {
            Ok(0) => Err("--keys must be `random` or at least 1".into()),
            Ok(n) => Ok(Keys::Count(n)),
            Err(_) => Err(format!("--keys: {text:?} is neither `random` nor a count")),
        }
    }
}

/// A key distribution over uids `1..=keys`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct KeyChoice {
    keys: u64,
    /// `(hot key count, share of requests)`; `None` = uniform.
    hot: Option<(u64, f64)>,
    /// A different sequence each round (random users), or the same one (a fixed set).
    fresh_per_round: bool,
}

impl KeyChoice {
    /// Every uid in `1..=keys` equally likely, the same sequence every round.
    pub(crate) fn uniform(keys: u64) -> Result<Self, String> {
        if keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        Ok(Self {
            keys,
            hot: None,
            fresh_per_round: false,
        })
    }

    /// Random users: uniform over `1..=RANDOM_USERS`, a fresh sequence every round, so a
    /// round does not log in again the users of the round before.
    pub(crate) fn random() -> Self {
        Self {
            keys: RANDOM_USERS,
            hot: None,
            fresh_per_round: true,
        }
    }

    /// As `--keys` says.
    pub(crate) fn from_keys(keys: Keys) -> Result<Self, String> {
        match keys {
            Keys::Random => Ok(Self::random()),
            Keys::Count(n) => Self::uniform(n),
        }
    }

    /// `share` of the requests go to uids `1..=hot_keys`, the rest as `self` picks them.
    pub(crate) fn hot(self, hot_keys: u64, share: f64) -> Result<Self, String> {
        if hot_keys == 0 || hot_keys > self.keys {
            return Err("--hot-keys must be between 1 and the number of keys".into());
        }
        if !(0.0..=1.0).contains(&share) {
            return Err("--hot-share must be between 0 and 1".into());
        }
        Ok(Self {
            hot: Some((hot_keys, share)),
            ..self
        })
    }

    /// The seed of `connection`'s key sequence in `round` (from 1): the same on every target,
    /// so every target sees the same keys; with random users, different in each round.
    pub(crate) fn seed(&self, connection: usize, round: usize) -> u64 {
        let connection = connection as u64 + 1;
        if self.fresh_per_round {
            // splitmix64 of (round, connection): seeds far apart, so no two sequences overlap.
            let mut z = ((round as u64) << 32 | connection).wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        } else {
            connection
        }
    }

    /// The next uid.
    pub(crate) fn pick(&self, rng: &mut fastrand::Rng) -> u64 {
        match self.hot {
            Some((hot_keys, share)) if rng.f64() < share => rng.u64(1..=hot_keys),
            _ => rng.u64(1..=self.keys),
        }
    }

    /// A few words for a column heading: `random users`, `10000 keys`, `10000 keys, hot`.
    pub(crate) fn short(&self) -> String {
        let base = if self.fresh_per_round {
            "random users".to_owned()
        } else {
            format!("{} keys", self.keys)
        };
        if self.hot.is_some() {
            format!("{base}, hot")
        } else {
            base
        }
    }

    /// A short description for the report header.
    pub(crate) fn describe(&self) -> String {
        let base = if self.fresh_per_round {
            format!(
                "random users (uniform over {} uids, fresh each round: nearly every claim a \
                 first login)",
                self.keys
            )
        } else {
            format!("{} keys uniform", self.keys)
        };
        match self.hot {
            None => base,
            Some((hot, share)) => format!(
                "{base}, {:.0}% of requests on {hot} hot keys",
                share * 100.0
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn keys_are_random_or_a_count() {
        assert_eq!("random".parse::<Keys>(), Ok(Keys::Random));
        assert_eq!("10000".parse::<Keys>(), Ok(Keys::Count(10_000)));
        assert_eq!("10_000".parse::<Keys>(), Ok(Keys::Count(10_000)));
        assert!("0".parse::<Keys>().is_err());
        assert!("many".parse::<Keys>().is_err());
        assert!("-3".parse::<Keys>().is_err());
    }

    #[test]
    fn uniform_stays_in_range_and_covers_it() {
        let choice = KeyChoice::uniform(4).unwrap();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut seen = [0_u32; 5];
        for _ in 0..1000 {
            let uid = choice.pick(&mut rng);
            assert!((1..=4).contains(&uid), "{uid}");
            seen[usize::try_from(uid).unwrap()] += 1;
        }
        assert!(seen[1..].iter().all(|n| *n > 150), "{seen:?}");
    }

    #[test]
    fn a_fixed_set_repeats_its_sequence_every_round() {
        // The behaviour before random users: connection i seeded i + 1 in every round.
        let choice = KeyChoice::uniform(10_000).unwrap();
        assert_eq!(choice.seed(0, 1), 1);
        assert_eq!(choice.seed(63, 5), 64);
    }

    #[test]
    fn random_users_span_the_base_and_rarely_repeat() {
        let choice = KeyChoice::from_keys(Keys::Random).unwrap();
        // 64 connections, 3 rounds, 1000 claims each: 192 000 claims.
        let mut seen = HashSet::new();
        let (mut claims, mut low, mut high) = (0_u64, 0_u64, 0_u64);
        for round in 1..=3 {
            for connection in 0..64 {
                let mut rng = fastrand::Rng::with_seed(choice.seed(connection, round));
                for _ in 0..1000 {
                    let uid = choice.pick(&mut rng);
                    assert!((1..=RANDOM_USERS).contains(&uid), "{uid}");
                    low += u64::from(uid <= RANDOM_USERS / 2);
                    high += u64::from(uid > RANDOM_USERS / 100 * 99);
                    seen.insert(uid);
                    claims += 1;
                }
            }
        }
        // Uniform over 10^8: about n²/2·10^8 = 184 repeats by chance. A sequence repeated
        // across rounds or connections would repeat tens of thousands.
        let repeats = claims - seen.len() as u64;
        assert!(repeats < 400, "{repeats} repeated uids in {claims} claims");
        // Half the claims in the lower half, 1 % in the top percent: the whole base is used.
        assert!((94_000..=98_000).contains(&low), "{low}");
        assert!((1_500..=2_400).contains(&high), "{high}");
    }

    #[test]
    fn random_seeds_differ_by_round_and_connection() {
        let choice = KeyChoice::random();
        let seeds: HashSet<u64> = (1..=10)
            .flat_map(|round| (0..256).map(move |c| choice.seed(c, round)))
            .collect();
        assert_eq!(seeds.len(), 2560);
    }

    #[test]
    fn hot_share_goes_to_the_hot_keys() {
        let choice = KeyChoice::uniform(1000).unwrap().hot(2, 0.9).unwrap();
        let mut rng = fastrand::Rng::with_seed(7);
        let hot = (0..10_000).filter(|_| choice.pick(&mut rng) <= 2).count();
        // 90% forced onto the hot set, plus the uniform rest's tiny share of it.
        assert!((8_800..=9_200).contains(&hot), "{hot}");
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(KeyChoice::uniform(0).is_err());
        let ten = KeyChoice::uniform(10).unwrap();
        assert!(ten.hot(0, 0.5).is_err());
        assert!(ten.hot(11, 0.5).is_err());
        assert!(ten.hot(2, 1.5).is_err());
        assert!(KeyChoice::random().hot(16, 0.9).is_ok());
    }
}
