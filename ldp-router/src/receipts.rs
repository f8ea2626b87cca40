//! What the router makes of usage receipts ([`ldp_types::receipt`]) and of a contract's machine-checkable
//! predicates, after each result of [`Registry::route_and_submit`](crate::Registry::route_and_submit).
//!
//! - **Receipts.** A delegate whose card publishes a receipt key must sign, into each result's provenance, what the
//!   task consumed. The registry checks every receipt against that key, the task and session, and the figures the
//!   provenance reports; the verdict goes into [`Routed::receipt`](crate::Routed) and into a per-delegate
//!   [`ReceiptRecord`]. A task routed with [`ReceiptPreference::Prefer`] or [`ReceiptPreference::Require`] is sent
//!   only to delegates whose receipts have always verified (`Prefer` falls back to the others when none is left).
//! - **Predicates.** When the task's contract carries `check:` predicates, the router evaluates them on the output
//!   itself (it does not take the delegate's word in the provenance) and learns the fraction that held as a
//!   runtime observation of the delegate's quality for the skill, with the source `contract_check`.

pub use ldp_types::receipt::{ReceiptVerdict, check_receipt};
use ldp_types::{DelegationContract, RawJson};

/// How a task's routing treats delegates by their usage receipts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ReceiptPreference {
    /// Receipts are checked and recorded, but do not affect selection (the default).
    #[default]
    Any,
    /// Route to delegates whose receipts have always verified when there is one; else to any.
    Prefer,
    /// Route only to delegates that publish a receipt key and whose receipts have always verified.
    Require,
}

/// Receipt verdicts of one delegate so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReceiptRecord {
    /// Whether its card publishes a receipt key.
    pub published: bool,
    /// Results whose receipt verified.
    pub verified: u64,
    /// Results without a receipt although a key is published.
    pub missing: u64,
    /// Results whose receipt did not verify or did not match.
    pub invalid: u64,
}

impl ReceiptRecord {
    /// Counts one verdict.
    pub(crate) fn record(&mut self, verdict: &ReceiptVerdict) {
        match verdict {
            ReceiptVerdict::Verified => self.verified += 1,
            ReceiptVerdict::Missing => self.missing += 1,
            ReceiptVerdict::Invalid(_) => self.invalid += 1,
            // Nothing to count: the figures are self-reported (or a verdict of a later version).
            _ => {}
        }
    }

    /// Whether the delegate publishes a key and no receipt of it ever failed.
    pub fn trustworthy(&self) -> bool {
        self.published && self.missing == 0 && self.invalid == 0
    }
}

/// The fraction of the contract's `check:` predicates that `output` satisfies, or `None` when the contract has none.
pub fn predicate_score(contract: Option<&DelegationContract>, output: &RawJson) -> Option<f64> {
    let criteria = contract?.checkable_criteria().ok().filter(|c| !c.is_empty())?;
    let total = criteria.success.len() + criteria.safety.len();
    let failed = ldp_types::check_output(&criteria, output).len().min(total);
    #[allow(clippy::cast_precision_loss, reason = "predicate counts are small")]
    Some((total - failed) as f64 / total as f64)
}
