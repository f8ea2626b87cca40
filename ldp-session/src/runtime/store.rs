//! The store steps of a [`DelegateRuntime`] with a store attached ([`DelegateRuntime::attach_store`]): one
//! admission before the machine (replay claim, session lookup, and the task claim, status read or cancel, in one
//! store operation), the result written before the answer, and the lease renewer, which also stops the tasks
//! cancelled through other replicas. The rules are the machine's (`crate::shared`, `Responder`'s shared-state side);
//! this file only carries them to the store, each call under the store timeout.

use super::*;
use crate::shared::ReplayClaim;
use crate::store::OUTAGE_LINE_EVERY;

/// The most running tasks renewed, or sessions looked up, in one store call.
const RENEWAL_CHUNK: usize = 32;

/// A runtime's store and how it uses it.
pub(super) struct StoreLink {
    pub(super) store: Arc<dyn Store>,
    pub(super) opts: StoreOptions,
    /// This process's name as a task owner in the store: random per runtime, so a restarted replica does not take
    /// over the leases of the tasks its previous life left running.
    pub(super) replica: String,
    /// The store's failures, logged as outages: a line per failure would let any peer's traffic flood the logs.
    pub(super) outage: OutageLog,
}

impl StoreLink {
    /// One store call under the timeout: a late answer is a [`StoreError::Timeout`].
    pub(super) async fn call<T>(&self, op: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        let out = match tokio::time::timeout(self.opts.timeout, op).await {
            Ok(out) => out,
            Err(_) => Err(StoreError::Timeout { backend: self.store.backend(), after: self.opts.timeout }),
        };
        if out.is_ok() {
            self.outage.succeeded();
        }
        out
    }
}

impl DelegateRuntime {
    /// Shares this runtime's protocol state with other replicas through `store` (see [`crate::shared`]): every
    /// inbound message's replay entry, sessions, task claims and ended tasks. Call it once, before serving, within
    /// a tokio runtime; it returns the task that renews the leases of the tasks this replica runs (abort it to stop
    /// renewing), or `None` (and changes nothing) when a store is attached already. Without a store the machine's
    /// own tables are the only state, as before.
    pub fn attach_store(&self, store: Arc<dyn Store>, opts: StoreOptions) -> Option<tokio::task::JoinHandle<()>> {
        let replica = format!("{:016x}", rand::random::<u64>());
        let outage = OutageLog::new("the store", OUTAGE_LINE_EVERY);
        self.inner.store.set(StoreLink { store, opts, replica, outage }).ok()?;
        self.with_responder(|r| r.set_shared(true));
        // A weak handle: the renewer ends with the runtime instead of keeping it alive.
        let weak = Arc::downgrade(&self.inner);
        Some(tokio::spawn(async move { Self::renew_leases(weak).await }))
    }

    /// Closes the attached store, if any ([`Store::close`]): for a server's shutdown, once it serves no more and its
    /// lease renewer is stopped. Store calls after it fail (messages are refused `STORE_UNAVAILABLE`).
    pub async fn close_store(&self) -> Result<(), StoreError> {
        match self.inner.store.get() {
            Some(link) => link.store.close().await,
            None => Ok(()),
        }
    }

    /// This replica's owner name in the store, when a store is attached.
    pub fn replica_id(&self) -> Option<&str> {
        self.inner.store.get().map(|l| l.replica.as_str())
    }

    /// Renews, every third of the lease, the leases of the tasks this replica runs, and stops those the store says
    /// ended elsewhere (a TASK_CANCEL another replica received, or a lease that lapsed): their submitters get the
    /// store's answer. It also ends here the sessions of those tasks that were closed or expired through other
    /// replicas, with their tasks, as a close here would. A renewal that fails is retried at the next tick; the
    /// lease covers two misses.
    pub(super) async fn renew_leases(runtime: std::sync::Weak<RuntimeInner>) {
        let every = match runtime.upgrade().as_ref().and_then(|inner| inner.store.get()) {
            Some(link) => (link.opts.lease / 3).max(Duration::from_millis(10)),
            None => return,
        };
        loop {
            tokio::time::sleep(every).await;
            let Some(inner) = runtime.upgrade() else { return };
            let Some(link) = inner.store.get() else { return };
            let keys: Vec<TaskKey> = lock(&inner.running).keys().cloned().collect();
            if keys.is_empty() {
                continue;
            }
            // In chunks, each under the store timeout: a replica running many tasks renews them all even over a
            // slow link, and one chunk's failure does not cost the others their renewal.
            for chunk in keys.chunks(RENEWAL_CHUNK) {
                match link.call(link.store.renew_leases(&link.replica, chunk, link.opts.lease)).await {
                    Ok(lost) if !lost.is_empty() => {
                        let rt = DelegateRuntime { inner: inner.clone() };
                        rt.with_responder(|r| {
                            for (key, task) in lost {
                                // A record that completed is this replica's own answer, written meanwhile.
                                if let (SharedTaskStatus::Failed, Some(error)) = (task.status, task.error) {
                                    r.end_by_store(&key, *error);
                                }
                            }
                        });
                    }
                    Ok(_) => {}
                    Err(e) => {
                        link.outage.failed(&e, "could not renew the leases of running tasks");
                    }
                }
            }
            // Sessions closed (or expired) through other replicas end here too, with the tasks they run here, as
            // a close received here would end them.
            let mut sessions: Vec<String> = keys.into_iter().map(|k| k.session_id).collect();
            sessions.sort_unstable();
            sessions.dedup();
            for chunk in sessions.chunks(RENEWAL_CHUNK) {
                match link.call(link.store.ended_sessions(chunk)).await {
                    Ok(ended) if !ended.is_empty() => {
                        let rt = DelegateRuntime { inner: inner.clone() };
                        rt.with_responder(|r| {
                            for (id, how) in ended {
                                let how = match how {
                                    SessionLookup::Closed => crate::SharedEnd::Closed,
                                    _ => crate::SharedEnd::Expired,
                                };
                                r.end_shared_session(&id, how);
                            }
                        });
                    }
                    Ok(_) => {}
                    Err(e) => link.outage.failed(&e, "could not look up the sessions of running tasks"),
                }
            }
        }
    }

    /// Records a task's answer in the store before it is sent (a failure is logged: the answer still goes out), and
    /// returns the answer to send: `answer`, or, when the store already holds another end for the task (cancelled
    /// through another replica, or failed after a lapsed lease, since this replica last renewed its lease), the
    /// machine's TASK_FAILED with the store's error, so that the submitter hears what every status query will say.
    pub(super) async fn record_answer(&self, link: &StoreLink, key: &TaskKey, answer: Envelope) -> Envelope {
        let Some(task) = SharedTask::ended(link.replica.as_str(), &answer) else { return answer };
        let task = task.bounded(link.opts.max_result_bytes);
        let key_owned = key.clone();
        let held = match link.call(link.store.finish_task(key, &task)).await {
            Ok(TaskFinish::Refused(held)) => held,
            Ok(_) => return answer,
            Err(e) => {
                // The answer still goes out (the delegate's work is not thrown away), and the record is retried
                // off the caller's path, so that other replicas' status queries find the result once the store is
                // back instead of a lapsed lease.
                link.outage.failed(&e, "could not record a task's answer in the store; retrying");
                let rt = self.clone();
                tokio::spawn(async move { rt.record_ended(vec![(key_owned, task)]).await });
                return answer;
            }
        };
        match *held {
            SharedTask { status: SharedTaskStatus::Failed, error: Some(error), .. } => {
                let mode = answer.payload_mode;
                self.with_responder(|r| r.overruled_by_store(key, *error, mode)).unwrap_or(answer)
            }
            _ => answer,
        }
    }

    /// Records tasks that ended in the store (their answers were already sent or held). A record the store does not
    /// take (down, or slow past the timeout) is tried again, every third of the lease, for as long as the lease
    /// would have held: past it, another replica's status query may have failed the task `TASK_LEASE_EXPIRED`
    /// (retryable), which the store then keeps.
    pub(super) async fn record_ended(&self, records: Vec<(TaskKey, SharedTask)>) {
        let Some(link) = self.inner.store.get() else { return };
        let every = (link.opts.lease / 3).max(Duration::from_millis(10));
        for (key, task) in records {
            let task = task.bounded(link.opts.max_result_bytes);
            for attempt in 1..=3 {
                match link.call(link.store.finish_task(&key, &task)).await {
                    Ok(_) => break,
                    Err(e) if attempt == 3 => {
                        link.outage.failed(&e, "could not record an ended task in the store");
                    }
                    Err(_) => tokio::time::sleep(every).await,
                }
            }
        }
    }

    /// [`DelegateRuntime::handle_checked`] with a store: one store operation before the machine (the replay claim,
    /// the session, and a TASK_SUBMIT's claim or a status query's record), the claim settled after the machine's
    /// verdict, the session's creation or close committed before the answer.
    pub(super) async fn handle_stored(
        &self,
        link: &StoreLink,
        peer: &PeerContext,
        checked: crate::Checked,
        updates: Option<mpsc::Sender<Envelope>>,
        in_place: bool,
    ) -> Response {
        let (remote, claimed, dedupe) = match self.before_machine(link, peer, &checked).await {
            Ok((admitted, dedupe)) => match admitted.task {
                Some(TaskAnswer::Claim(claim)) => (None, Some(claim), dedupe),
                Some(TaskAnswer::Read(task) | TaskAnswer::Cancel(task)) => (task, None, None),
                _ => (None, None, None),
            },
            Err(refusal) => return Response::refused(refusal),
        };
        // The request itself, for answering a commit that fails after the machine accepted (rare messages only).
        let request =
            matches!(checked.envelope().body, ldp_types::Body::SessionPropose(_) | ldp_types::Body::SessionClose(_))
                .then(|| checked.envelope().clone());
        let submitted = match (&claimed, &checked.envelope().body) {
            (Some(_), ldp_types::Body::TaskSubmit(t)) => {
                Some(TaskKey { session_id: checked.envelope().session_id.clone(), task_id: t.task_id.clone() })
            }
            _ => None,
        };
        match self.admit(peer, checked, remote.as_ref()) {
            Decision::Answer(mut response) => {
                // The admission claimed a task the machine did not admit: it never runs, so the claim goes.
                if claimed == Some(TaskClaim::Claimed)
                    && let Some(key) = submitted
                {
                    self.release_claim(link, &key, dedupe).await;
                }
                self.after_machine(link, request.as_ref(), &mut response).await;
                response
            }
            Decision::Execute { task, stop, cancelled } => match self.settle_claim(link, &task, claimed, stop).await {
                Ok(stop) => self.execute(task, stop, cancelled, updates, in_place).await,
                Err(response) => response,
            },
        }
    }

    /// What the store must settle before the machine sees a message, in one store operation ([`Store::admit`]):
    /// its replay entry (refused if any replica saw it), its session (adopted if live in the store, ended here if
    /// closed or gone there), and its task: a TASK_SUBMIT's claim (not yet admitted by the machine: see
    /// [`DelegateRuntime::settle_claim`]), a status query's record, or the cancel of a task another replica runs. A
    /// store failure refuses the message, typed and retryable. With the store's answer, the dedupe entry a claim
    /// stood in for ([`crate::shared::TaskStep::Claim`]'s `dedupe`), for [`DelegateRuntime::release_claim`].
    pub(super) async fn before_machine(
        &self,
        link: &StoreLink,
        peer: &PeerContext,
        checked: &crate::Checked,
    ) -> Result<(Admitted, Option<ReplayClaim>), Refusal> {
        let env = checked.envelope();
        let refuse = |error: StoreError| {
            link.outage.failed(&error, "store call failed; message refused");
            self.with_responder(|r| r.refusal(env, error.to_ldp()))
        };
        // A message whose signature fails is refused by the machine without touching the store.
        if checked.signature().is_err() {
            return Ok((Admitted::replay_only(ReplayVerdict::Fresh), None));
        }
        let (mut replay, max_tasks, usage, claim_dedupes) = {
            let mut r = lock(&self.inner.responder);
            // A session this replica could not adopt is refused before the store acts on the message.
            if needs_session(env)
                && !matches!(env.body, ldp_types::Body::SessionPropose(_))
                && let Err(full) = r.room_for_session(peer, env)
            {
                let refusal = r.refusal(env, full);
                // A refusal can start a run of them, whose end the reaper logs.
                self.wake_reaper_if_sooner(&r);
                return Err(refusal);
            }
            (r.replay_claim(peer, env), r.shared_task_limit(), r.judges_by_usage(), r.claim_dedupes(env))
        };
        let dedupe = if claim_dedupes { replay.take() } else { None };
        let mut admission = Admission { replay, ..Admission::default() };
        if needs_session(env) {
            admission.session_id = Some(env.session_id.clone());
            let key = |task_id: &str| TaskKey { session_id: env.session_id.clone(), task_id: task_id.to_owned() };
            admission.task = match &env.body {
                ldp_types::Body::TaskSubmit(t) => Some(TaskStep::Claim {
                    key: key(&t.task_id),
                    task: SharedTask::running(link.replica.as_str(), env.payload_mode).with_message(dedupe.as_ref()),
                    lease: link.opts.lease,
                    max_tasks,
                    usage,
                    dedupe,
                }),
                ldp_types::Body::TaskUpdate(u) => Some(TaskStep::Read(key(&u.task_id))),
                // A task running here is cancelled by the machine, which then records its end.
                ldp_types::Body::TaskCancel(c) if !lock(&self.inner.running).contains_key(&key(&c.task_id)) => {
                    Some(TaskStep::Cancel(key(&c.task_id)))
                }
                _ => None,
            };
        }
        if admission.replay.is_none() && admission.session_id.is_none() {
            return Ok((Admitted::replay_only(ReplayVerdict::Fresh), None));
        }
        let admitted = link.call(link.store.admit(&admission)).await.map_err(refuse)?;
        let dedupe = match admission.task {
            Some(TaskStep::Claim { dedupe, .. }) => dedupe,
            _ => None,
        };
        let now = self.now();
        // One turn of the machine's lock for the verdict and the session.
        let verdict = self.with_responder(|r| {
            if let Some(refusal) = r.refuse_shared_replay(env, admitted.replay) {
                return Err(refusal);
            }
            match &admitted.session {
                Some(SessionLookup::Live(shared)) => {
                    if let Err(full) = r.adopt_session(now, shared) {
                        return Err(r.refusal(env, full));
                    }
                }
                Some(SessionLookup::Closed) => {
                    r.end_shared_session(&env.session_id, crate::SharedEnd::Closed);
                }
                Some(SessionLookup::Expired) => {
                    r.end_shared_session(&env.session_id, crate::SharedEnd::Expired);
                }
                // Established nowhere, or ended long ago: a session live only here has ended.
                Some(_) if r.session_state(&env.session_id).is_some() => {
                    r.end_shared_session(&env.session_id, crate::SharedEnd::Expired);
                }
                _ => {}
            }
            if let Some(usage) = &admitted.usage {
                r.merge_shared_usage(&env.session_id, usage);
            }
            Ok(())
        });
        if let Err(refusal) = verdict {
            // A TASK_SUBMIT claimed in the admission that this replica then refused never runs: the claim goes.
            if let (Some(TaskAnswer::Claim(TaskClaim::Claimed)), ldp_types::Body::TaskSubmit(t)) =
                (&admitted.task, &env.body)
            {
                let key = TaskKey { session_id: env.session_id.clone(), task_id: t.task_id.clone() };
                self.release_claim(link, &key, dedupe).await;
            }
            return Err(refusal);
        }
        Ok((admitted, dedupe))
    }

    /// Takes back a claim made in the admission of a TASK_SUBMIT the machine then refused (it never runs). A
    /// failure is only logged: the claim then holds until its lease lapses, and the task id is free again after.
    /// The dedupe entry the claim stood in for (`dedupe`) is written with the release, as a message refused before
    /// its claim has it, so that the same message resent to another replica is refused `REPLAY_DETECTED` there too.
    pub(super) async fn release_claim(&self, link: &StoreLink, key: &TaskKey, dedupe: Option<ReplayClaim>) {
        if let Err(e) = link.call(link.store.release_task(key, &link.replica, dedupe.as_ref())).await {
            link.outage.failed(&e, "could not release the claim of a refused task");
        }
    }

    /// Commits what the machine decided to the store: a new session (discarded here, and the proposal refused
    /// retryably, when it cannot be committed) and a close.
    pub(super) async fn after_machine(&self, link: &StoreLink, request: Option<&Envelope>, response: &mut Response) {
        let Response::Reply(reply) = &*response else { return };
        match &reply.body {
            ldp_types::Body::SessionAccept(accept) => {
                let id = accept.session_id.clone();
                let Some(shared) = lock(&self.inner.responder).shared_session(&id) else { return };
                let error = match link.call(link.store.create_session(&shared)).await {
                    Ok(true) => return,
                    // Two replicas drawing the same random id: no outage of the store, and too rare to flood.
                    Ok(false) => {
                        let taken = StoreError::Unavailable {
                            backend: link.store.backend(),
                            reason: format!("session id {id:?} was taken by another replica meanwhile"),
                        };
                        tracing::warn!(error = %taken, "could not record a new session in the store; proposal refused");
                        taken
                    }
                    Err(e) => {
                        link.outage.failed(&e, "could not record a new session in the store; proposal refused");
                        e
                    }
                };
                self.with_responder(|r| r.end_shared_session(&id, crate::SharedEnd::Discarded));
                if let Some(request) = request {
                    *response = Response::refused(self.with_responder(|r| r.refusal(request, error.to_ldp())));
                }
            }
            ldp_types::Body::SessionClose(_) => {
                if let Err(e) = link.call(link.store.close_session(&reply.session_id)).await {
                    link.outage.failed(&e, "could not record a session's close in the store");
                    // The session is closed here; the store (the authority) still has it live, so a retried close
                    // is adopted again and closed then.
                    if let Some(request) = request {
                        *response = Response::refused(self.with_responder(|r| r.refusal(request, e.to_ldp())));
                    }
                }
            }
            _ => {}
        }
    }

    /// Settles the store claim of an admitted task before its delegate runs. `Err` carries the answer when the task must
    /// not run here: another submission holds it (`DUPLICATE_TASK`), or the store failed (`STORE_UNAVAILABLE`).
    /// `claimed` is the claim the admission made ([`DelegateRuntime::before_machine`]), if it made one; without
    /// one, the task is claimed now.
    pub(super) async fn settle_claim(
        &self,
        link: &StoreLink,
        task: &TaskRequest,
        claimed: Option<TaskClaim>,
        stop: oneshot::Receiver<Envelope>,
    ) -> Result<oneshot::Receiver<Envelope>, Response> {
        let claimed = match claimed {
            Some(claimed) => Ok(claimed),
            None => {
                let record = SharedTask::running(link.replica.as_str(), task.payload_mode);
                link.call(link.store.claim_task(&task.key, &record, link.opts.lease)).await
            }
        };
        let refusal = match claimed {
            Ok(TaskClaim::Claimed) => return Ok(stop),
            Ok(TaskClaim::LimitReached) => self.with_responder(|r| r.refuse_over_limit(&task.key)),
            Ok(_) => self.with_responder(|r| r.refuse_claimed(&task.key)),
            Err(e) => {
                link.outage.failed(&e, "could not claim a task in the store; refused");
                self.with_responder(|r| r.retract_task(&task.key, e.to_ldp()))
            }
        };
        lock(&self.inner.running).remove(&task.key);
        match refusal {
            Some(refusal) => Err(Response::refused(refusal)),
            // The machine ended the task meanwhile (its session closed) and sent its answer to `stop`.
            None => Err(stop.await.map_or(Response::Accepted, Response::reply)),
        }
    }
}
