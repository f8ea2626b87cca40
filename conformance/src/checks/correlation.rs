//! Request/reply correlation, judged on every reply the earlier checks received (on every transport and on the
//! streaming endpoint): a task's replies name the task, a reply has a message id of its own, and a SESSION_ACCEPT
//! names one session in its envelope and its body.

use super::judge_observed;
use crate::ctx::Ctx;

pub(super) async fn wire_correlation(ctx: &mut Ctx) {
    let lists = [
        (
            "LDP-CORR-001",
            ctx.obs.task_replies,
            std::mem::take(&mut ctx.obs.task_ids),
            "replies to TASK_SUBMITs carry the submitted task_id",
        ),
        (
            "LDP-CORR-002",
            ctx.obs.envelopes_seen,
            std::mem::take(&mut ctx.obs.reused_ids),
            "replies carry a message_id of their own",
        ),
        (
            "LDP-CORR-003",
            ctx.obs.accepts_seen,
            std::mem::take(&mut ctx.obs.accept_ids),
            "SESSION_ACCEPTs name the same session in the envelope and the body",
        ),
    ];
    for (req, seen, list, ok) in lists {
        if seen == 0 {
            ctx.not_testable(req, "no such reply was received");
        } else {
            judge_observed(ctx, req, &list, format!("{seen} {ok}"));
        }
    }
}
