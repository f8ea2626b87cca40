//! The crate's one error type.

/// Why the router refused an input or could not decide.
///
/// Every variant is caused by the caller (a malformed candidate, an impossible request, an unknown delegate); the
/// router has no peer-facing errors because it performs no IO.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// A quality value was not a number within `[0, 1]`.
    #[error("quality {0} is not within [0, 1]")]
    QualityOutOfRange(f64),
    /// A cost, latency, weight or duration was negative or not finite.
    #[error("{field} must be finite and non-negative, got {value}")]
    InvalidFigure {
        /// Which field was wrong.
        field: &'static str,
        /// The rejected value.
        value: f64,
    },
    /// A delegate id, skill or trust domain was empty.
    #[error("{0} must not be empty")]
    EmptyName(&'static str),
    /// A candidate listed the same skill twice.
    #[error("delegate {delegate_id:?} lists skill {skill:?} more than once")]
    DuplicateSkill {
        /// The offending delegate.
        delegate_id: String,
        /// The repeated skill.
        skill: String,
    },
    /// No registered delegate offers the requested skill.
    #[error("no registered delegate offers skill {0:?}")]
    UnknownSkill(String),
    /// Delegates offer the skill but the request's filters rejected all of them.
    #[error("no eligible delegate for skill {skill:?} ({rejected})")]
    NoEligibleDelegate {
        /// The requested skill.
        skill: String,
        /// How many candidates each filter rejected.
        rejected: crate::Rejections,
    },
    /// An outcome or query named a delegate and skill the router has never registered.
    #[error("delegate {delegate_id:?} was never registered for skill {skill:?}")]
    UnknownDelegate {
        /// The delegate named.
        delegate_id: String,
        /// The skill named.
        skill: String,
    },
    /// A configuration value is out of its documented range.
    #[error("invalid router configuration: {0}")]
    InvalidConfig(&'static str),
}
