//! Identity-aware LDP routing that cannot be gamed by inflated quality claims.
//!
//! The router is a sans-IO core: it holds [`Candidate`]s (delegates with their skill offers and
//! [`QualityClaim`]s), picks one per task, and learns from verified outcomes. It never reads a clock (every call
//! takes `now`) and draws all randomness from a seed in its [`RouterConfig`], so the same inputs give the same
//! decisions.
//!
//! ```text
//!  identity cards, attestations ──► Candidate ──upsert──► Router ◄──record_outcome── Verifier score
//!                                                           │
//!        SelectionRequest (skill, strategy, filters) ──select──► Decision (delegate + Explanation)
//!                                                           │
//!        failure of the submitted task ──► FailoverPolicy::decide ──► Retry / Reroute / Escalate
//! ```
//!
//! * [`ClaimPolicy`] turns claims into an [`Assessment`]: each claim type has a weight in pseudo-observations,
//!   attested claims decay with age and stop counting at `expires_at`, claims for another skill say nothing, and
//!   by default a `self_claimed` score is ignored as soon as anything better exists.
//! * The router's own outcomes form a recency-weighted `runtime_observed` estimate per delegate and skill, and
//!   selection explores ([`Exploration::Thompson`] by default), so a new honest delegate can earn traffic and an
//!   inflating one loses it after a few outcomes.
//! * [`Strategy`] picks by quality, cost, latency or a balance, after filters for trust domain, jurisdiction,
//!   budget ceiling and quality floor; every [`Decision`] carries its [`Explanation`].
//! * [`FailoverPolicy::decide`] maps a typed failure and the attempt state to the next action within the
//!   contract's budget and deadline.
//! * [`paradox`] reproduces the provenance-paradox experiment of the paper with this same router.
//!
//! ```
//! use ldp_router::{
//!     Candidate, ClaimType, Observation, Quality, QualityClaim, Router, RouterConfig, SelectionRequest, SkillOffer,
//!     Strategy, VerificationSource,
//! };
//! use time::macros::datetime;
//!
//! # fn main() -> Result<(), ldp_router::RouterError> {
//! let now = datetime!(2026-03-15 12:00 UTC);
//! let mut router = Router::new(RouterConfig::default())?;
//! // A boaster: claims 0.99 about itself.
//! router.upsert(
//!     &Candidate::new("ldp:delegate:boaster", "research.internal")
//!         .offering(SkillOffer::new("reasoning", 0.01, 800))
//!         .with_claim(QualityClaim::self_claimed("reasoning", Quality::new(0.99)?)),
//! )?;
//! // A delegate whose 0.85 was attested by an evaluation service last week.
//! router.upsert(
//!     &Candidate::new("ldp:delegate:solid", "research.internal")
//!         .offering(SkillOffer::new("reasoning", 0.02, 1200))
//!         .with_claim(QualityClaim::attested(
//!             ClaimType::IssuerAttested,
//!             "reasoning",
//!             Quality::new(0.85)?,
//!             "ldp:issuer:evals",
//!             datetime!(2026-03-08 12:00 UTC),
//!         )),
//! )?;
//!
//! let request = SelectionRequest::new("reasoning").strategy(Strategy::Quality).trust_domain("research.internal");
//! let decision = router.select(&request, now)?;
//! println!("{decision}");
//!
//! // The verifier scores the boaster's work poorly a few times; its self-claim stops counting.
//! for _ in 0..5 {
//!     router.record_outcome(
//!         &Observation {
//!             delegate_id: "ldp:delegate:boaster".into(),
//!             skill: "reasoning".into(),
//!             score: Quality::new(0.4)?,
//!             source: VerificationSource::Caller,
//!         },
//!         now,
//!     )?;
//! }
//! let boaster = router.assess("ldp:delegate:boaster", "reasoning", now)?;
//! assert!(boaster.self_claim_ignored && boaster.mean < 0.5);
//! # Ok(())
//! # }
//! ```
//!
//! Feeding candidates from identity cards: [`CardMapping`] turns an `IdentityCard` into a [`Candidate`] (one
//! [`SkillOffer`] per capability, the card's quality scores as `self_claimed`, whatever label the card gives them)
//! and adds one attested claim per [`AttestationClaim`] that [`verify_attestation`] accepts: signed `ed25519-jcs`
//! by an issuer in [`TrustedIssuers`], unexpired, about this delegate and one of its skills. Rejected attestations
//! are logged and appear as [`ClaimNote`]s in every [`Explanation`] that ranks the delegate. [`resolve_ldp_url`]
//! maps `ldp://` URLs (RFC 9.2) to HTTP or WebSocket endpoints. All of this is IO-free.
//!
//! With the `runtime` feature (on by default), [`Registry`] discovers delegates by URL through any
//! [`TransportFactory`] (a [`SchemeDispatcher`] sends `ldp://` to the [`LdpAdapter`] and `a2a://`/`mcp://` to
//! adapters registered for them), refreshes them and removes those whose identity keeps failing, and
//! [`Registry::route_and_submit`] selects, submits over the session layer, verifies, learns and fails over. Build
//! with `default-features = false` for the selection core alone, without `ldp-session` and tokio.

#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![warn(clippy::exhaustive_enums)]
// The overview links the `runtime` feature's items, which do not exist without it.
#![cfg_attr(not(feature = "runtime"), allow(rustdoc::broken_intra_doc_links))]

mod attestation;
mod candidate;
mod card;
mod claim;
#[cfg(feature = "runtime")]
mod discovery;
mod endpoint;
mod error;
mod failover;
#[cfg(feature = "runtime")]
pub mod issuer;
mod learner;
pub mod paradox;
mod policy;
pub mod receipts;
#[cfg(feature = "runtime")]
mod registry;
pub mod route;
mod router;
mod select;
pub mod stats;

pub use attestation::{
    AttestationClaim, AttestationRejection, TrustedIssuers, VerifiedAttestation, WireTime, sign_attestation,
    verify_attestation,
};
pub use card::{BRIDGED_EXTRA, CardMapping, IgnoredAttestation, MappedCard, embedded as embedded_attestations};
#[cfg(feature = "runtime")]
pub use discovery::{
    Connector, DiscoveryError, LDP_SCHEMES, LdpAdapter, SchemeDispatcher, SharedTransport, TransportFactory,
};
pub use endpoint::{Binding, Endpoint, UrlError, resolve_ldp_url};
#[cfg(feature = "runtime")]
pub use registry::{RefreshReport, Registration, Registry, RegistryConfig};
#[cfg(feature = "runtime")]
pub use route::{
    Attempt, JudgeScorer, NoScore, OutcomeScorer, RouteError, RouteErrorKind, RouteTask, Routed, ScoreFn, Verdict,
};

pub use candidate::{Candidate, ClaimNote, SkillOffer};
pub use claim::{ClaimType, Quality, QualityClaim};
pub use error::RouterError;
pub use failover::{AttemptState, FailoverAction, FailoverPolicy, Failure, GiveUpReason};
pub use learner::{Exploration, LearnerConfig, Observation, ObservedQuality, VerificationSource, Verifier};
pub use policy::{Assessment, ClaimPolicy, ClaimWeights, SelfClaimedRule};
pub use receipts::{ReceiptPreference, ReceiptRecord, ReceiptVerdict};
pub use router::{Router, RouterConfig};
pub use select::{
    BalancedWeights, Decision, ExplainDepth, Explanation, Rejections, ScoredCandidate, SelectionRequest, Strategy,
};
