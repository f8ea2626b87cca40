//! Scores in `0.0..=1.0` (quality, confidence), validated when parsed.

use serde::{Deserialize, Deserializer, Serialize};

use crate::Error;

/// A finite number in `0.0..=1.0`. Parsing rejects anything else, so a held `Score` is always valid.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Score(f64);

impl Score {
    /// Validates `value`.
    pub fn new(value: f64) -> Result<Self, Error> {
        if value.is_finite() && (0.0..=1.0).contains(&value) {
            Ok(Self(value))
        } else {
            Err(Error::ScoreOutOfRange(value))
        }
    }

    /// Clamps any finite `value` into range (NaN becomes 0).
    pub fn saturating(value: f64) -> Self {
        if value.is_nan() { Self(0.0) } else { Self(value.clamp(0.0, 1.0)) }
    }

    /// The value.
    pub const fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Score {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(deserializer)?;
        Score::new(value).map_err(serde::de::Error::custom)
    }
}

impl From<Score> for f64 {
    fn from(s: Score) -> f64 {
        s.0
    }
}
