//! Confidence scores, the spec's bands, and the propagation rule.

use std::fmt;

use crate::LctlError;

/// A confidence score in 0.0-1.0. Construction validates, so every `Confidence` is in range.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Confidence(f64);

impl Confidence {
    /// Certainty.
    pub const CERTAIN: Confidence = Confidence(1.0);
    /// No confidence at all (what a failed step reports).
    pub const NONE: Confidence = Confidence(0.0);
    /// The receiving protocol flags critical facts below this value.
    pub const RECEIVING_CONCERN_THRESHOLD: Confidence = Confidence(0.7);

    /// Validates `value`; rejects NaN, infinities and anything outside 0.0-1.0.
    pub fn new(value: f64) -> Result<Self, LctlError> {
        if value.is_finite() && (0.0..=1.0).contains(&value) {
            Ok(Confidence(value))
        } else {
            Err(LctlError::ConfidenceOutOfRange(value))
        }
    }

    /// The raw score.
    pub fn value(self) -> f64 {
        self.0
    }

    /// Which row of the spec's confidence table this score falls in.
    pub fn band(self) -> ConfidenceBand {
        ConfidenceBand::of(self)
    }

    /// The spec's propagation advice for this score.
    pub fn advice(self) -> PropagationAdvice {
        self.band().advice()
    }

    /// The smaller of two scores.
    pub fn min(self, other: Confidence) -> Confidence {
        if other.0 < self.0 { other } else { self }
    }
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2}", self.0)
    }
}

/// The rows of the spec's "Confidence Guidelines" table.
///
/// The table lists two-decimal ranges (0.80-0.94, 0.95-1.0); scores between them (0.945)
/// belong to the lower row, so each band is "at least its lower bound".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ConfidenceBand {
    /// Below 0.40.
    Uncertain,
    /// 0.40-0.59.
    Low,
    /// 0.60-0.79.
    Moderate,
    /// 0.80-0.94.
    High,
    /// 0.95-1.0.
    Verified,
}

impl ConfidenceBand {
    /// The band containing `confidence`.
    pub fn of(confidence: Confidence) -> Self {
        let value = confidence.value();
        if value >= 0.95 {
            ConfidenceBand::Verified
        } else if value >= 0.80 {
            ConfidenceBand::High
        } else if value >= 0.60 {
            ConfidenceBand::Moderate
        } else if value >= 0.40 {
            ConfidenceBand::Low
        } else {
            ConfidenceBand::Uncertain
        }
    }

    /// The spec's "Meaning" column.
    pub fn meaning(self) -> &'static str {
        match self {
            ConfidenceBand::Verified => "verified/certain",
            ConfidenceBand::High => "high confidence",
            ConfidenceBand::Moderate => "moderate",
            ConfidenceBand::Low => "low",
            ConfidenceBand::Uncertain => "uncertain",
        }
    }

    /// The spec's "Propagation Rule" column, typed.
    pub fn advice(self) -> PropagationAdvice {
        match self {
            ConfidenceBand::Verified => PropagationAdvice::PropagateAsIs,
            ConfidenceBand::High => PropagationAdvice::PropagateNoteSource,
            ConfidenceBand::Moderate => PropagationAdvice::VerifyBeforeActing,
            ConfidenceBand::Low => PropagationAdvice::FlagForHumanReview,
            ConfidenceBand::Uncertain => PropagationAdvice::DoNotPropagate,
        }
    }
}

/// What a receiving agent should do with a fact, by band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PropagationAdvice {
    /// 0.95-1.0: can propagate as-is.
    PropagateAsIs,
    /// 0.80-0.94: propagate, noting the fact's source.
    PropagateNoteSource,
    /// 0.60-0.79: verify before acting on it.
    VerifyBeforeActing,
    /// 0.40-0.59: flag for human review.
    FlagForHumanReview,
    /// Below 0.40: do not propagate.
    DoNotPropagate,
}

impl PropagationAdvice {
    /// Whether a fact with this advice may be handed to the next agent at all.
    pub fn may_propagate(self) -> bool {
        self != PropagationAdvice::DoNotPropagate
    }
}

impl fmt::Display for PropagationAdvice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PropagationAdvice::PropagateAsIs => "propagate as-is",
            PropagationAdvice::PropagateNoteSource => "propagate, note source",
            PropagationAdvice::VerifyBeforeActing => "verify before acting",
            PropagationAdvice::FlagForHumanReview => "flag for human review",
            PropagationAdvice::DoNotPropagate => "do not propagate",
        })
    }
}

/// The spec's propagation rule: the highest confidence a child may carry,
/// `min(parent confidence, own confidence)`.
pub fn propagate(parent: Confidence, own: Confidence) -> Confidence {
    parent.min(own)
}

/// The propagation rule as a check: `Ok` when `child <= min(parent, own)`.
///
/// Returns the bound that was exceeded otherwise. A tiny tolerance absorbs decimal
/// round-off (0.1 + 0.2 style), which is far below the two decimals LCTL writes.
pub fn check_propagation(parent: Confidence, own: Confidence, child: Confidence) -> Result<(), Confidence> {
    let bound = propagate(parent, own);
    if child.value() <= bound.value() + 1e-9 { Ok(()) } else { Err(bound) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: f64) -> Confidence {
        Confidence::new(v).unwrap()
    }

    #[test]
    fn bands_follow_the_spec_table_boundaries() {
        let cases = [
            (1.0, ConfidenceBand::Verified),
            (0.95, ConfidenceBand::Verified),
            (0.94, ConfidenceBand::High),
            (0.80, ConfidenceBand::High),
            (0.79, ConfidenceBand::Moderate),
            (0.60, ConfidenceBand::Moderate),
            (0.59, ConfidenceBand::Low),
            (0.40, ConfidenceBand::Low),
            (0.39, ConfidenceBand::Uncertain),
            (0.0, ConfidenceBand::Uncertain),
        ];
        for (value, band) in cases {
            assert_eq!(c(value).band(), band, "{value}");
        }
        assert_eq!(c(0.3).advice(), PropagationAdvice::DoNotPropagate);
        assert!(!c(0.3).advice().may_propagate());
        assert_eq!(c(0.5).advice(), PropagationAdvice::FlagForHumanReview);
        assert_eq!(c(0.7).advice(), PropagationAdvice::VerifyBeforeActing);
        assert_eq!(c(0.85).advice(), PropagationAdvice::PropagateNoteSource);
        assert_eq!(c(0.97).advice(), PropagationAdvice::PropagateAsIs);
    }

    #[test]
    fn out_of_range_is_rejected() {
        for bad in [-0.01, 1.01, f64::NAN, f64::INFINITY] {
            assert!(Confidence::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn propagation_takes_the_minimum() {
        assert_eq!(propagate(c(0.9), c(0.7)), c(0.7));
        assert_eq!(propagate(c(0.6), c(0.95)), c(0.6));
        assert!(check_propagation(c(0.9), c(0.7), c(0.7)).is_ok());
        assert_eq!(check_propagation(c(0.9), c(0.7), c(0.75)), Err(c(0.7)));
        assert_eq!(check_propagation(c(0.5), c(0.9), c(0.6)), Err(c(0.5)));
    }
}
