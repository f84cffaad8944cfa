//! How each request picks its key: uniform, or a hot set taking most of the load.

/// A key distribution over uids `1..=keys`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyChoice {
    keys: u64,
    /// `(hot key count, share of requests)`; `None` = uniform.
    hot: Option<(u64, f64)>,
}

impl KeyChoice {
    /// Every uid in `1..=keys` equally likely.
    pub(crate) fn uniform(keys: u64) -> Result<Self, String> {
        if keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        Ok(Self { keys, hot: None })
    }

    /// `share` of the requests go to uids `1..=hot_keys`, the rest uniformly to all keys.
    pub(crate) fn hot(keys: u64, hot_keys: u64, share: f64) -> Result<Self, String> {
        let uniform = Self::uniform(keys)?;
        if hot_keys == 0 || hot_keys > keys {
            return Err("--hot-keys must be between 1 and --keys".into());
        }
        if !(0.0..=1.0).contains(&share) {
            return Err("--hot-share must be between 0 and 1".into());
        }
        Ok(Self {
            hot: Some((hot_keys, share)),
            ..uniform
        })
    }

    /// The next uid.
    pub(crate) fn pick(&self, rng: &mut fastrand::Rng) -> u64 {
        match self.hot {
            Some((hot_keys, share)) if rng.f64() < share => rng.u64(1..=hot_keys),
            _ => rng.u64(1..=self.keys),
        }
    }

    /// A short description for the report header.
    pub(crate) fn describe(&self) -> String {
        match self.hot {
            None => format!("{} keys uniform", self.keys),
            Some((hot, share)) => format!(
                "{} keys, {:.0}% of requests on {hot} hot keys",
                self.keys,
                share * 100.0
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn hot_share_goes_to_the_hot_keys() {
        let choice = KeyChoice::hot(1000, 2, 0.9).unwrap();
        let mut rng = fastrand::Rng::with_seed(7);
        let hot = (0..10_000).filter(|_| choice.pick(&mut rng) <= 2).count();
        // 90% forced onto the hot set, plus the uniform rest's tiny share of it.
        assert!((8_800..=9_200).contains(&hot), "{hot}");
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(KeyChoice::uniform(0).is_err());
        assert!(KeyChoice::hot(10, 0, 0.5).is_err());
        assert!(KeyChoice::hot(10, 11, 0.5).is_err());
        assert!(KeyChoice::hot(10, 2, 1.5).is_err());
    }
}
