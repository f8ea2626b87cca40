//! The A2A server's state, bounded: contexts (one LDP session each) and tasks (each one LDP task).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2a::{Message, StreamResponse, Task, TaskState, TaskStatus};
use ldp_session::TaskKey;
use ldp_session::runtime::Client;
use tokio::sync::{OnceCell, broadcast, watch};

use super::push::Targets;
use crate::upstream::Upstream;

/// Messages kept in a task's history (the oldest go first): the user's turns and the agent's questions.
pub(crate) const MAX_HISTORY: usize = 64;

/// The LDP session of an A2A context, once opened.
pub(crate) struct Opened<U: Upstream> {
    pub(crate) client: Arc<Client<U::Transport>>,
    pub(crate) session_id: String,
}

/// An A2A context: the principal that opened it and its LDP session (opened on its first message).
pub(crate) struct Context<U: Upstream> {
    pub(crate) principal: Option<String>,
    pub(crate) opened: OnceCell<Opened<U>>,
    /// Tasks of this context still running: a context with some is never evicted.
    pub(crate) running: AtomicUsize,
    last_used: Mutex<Instant>,
}

impl<U: Upstream> Context<U> {
    fn touch(&self, now: Instant) {
        if let Ok(mut last) = self.last_used.lock() {
            *last = now;
        }
    }

    fn idle_since(&self) -> Instant {
        self.last_used.lock().map(|l| *l).unwrap_or_else(|_| Instant::now())
    }

    fn busy(&self) -> bool {
        self.running.load(Ordering::SeqCst) > 0
    }
}

/// A task: its A2A view (updated as the LDP task runs), the LDP key of its current turn, whether a turn runs, and
/// who follows it (subscribers, push targets).
pub(crate) struct TaskEntry {
    pub(crate) principal: Option<String>,
    /// The LDP skill every turn of the task runs.
    pub(crate) skill: String,
    /// The order of creation (ListTasks lists the newest first).
    seq: u64,
    pub(crate) task: Mutex<Task>,
    pub(crate) key: Mutex<Option<TaskKey>>,
    pub(crate) cancel_requested: AtomicBool,
    /// `true` while no turn runs: the task reached a terminal state, or waits for input (`INPUT_REQUIRED`).
    pub(crate) done: watch::Sender<bool>,
    /// Every event of the task, for `SubscribeToTask` streams (a subscriber that lags gets the task anew).
    pub(crate) events: broadcast::Sender<StreamResponse>,
    /// The task's push notification targets.
    pub(crate) pushes: Targets,
    ended: Mutex<Option<Instant>>,
}

/// The creation counter of tasks.
static SEQ: AtomicU64 = AtomicU64::new(0);

impl TaskEntry {
    /// A submitted task; `events` bounds what a subscriber may lag behind.
    pub(crate) fn new(id: String, context_id: String, principal: Option<String>, skill: String, events: usize) -> Self {
        let task = Task {
            id,
            context_id,
            status: TaskStatus { state: TaskState::Submitted, message: None, timestamp: Some(chrono::Utc::now()) },
            artifacts: None,
            history: None,
            metadata: None,
        };
        Self {
            principal,
            skill,
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
            task: Mutex::new(task),
            key: Mutex::new(None),
            cancel_requested: AtomicBool::new(false),
            done: watch::channel(false).0,
            events: broadcast::channel(events.max(2)).0,
            pushes: Targets::default(),
            ended: Mutex::new(None),
        }
    }

    /// Adds `message` to the task's history (bounded: the oldest make room), with the task's ids filled in.
    pub(crate) fn record(&self, mut message: Message) {
        if let Ok(mut task) = self.task.lock() {
            message.task_id = Some(task.id.clone());
            message.context_id = Some(task.context_id.clone());
            let history = task.history.get_or_insert_with(Vec::new);
            if history.len() >= MAX_HISTORY {
                history.remove(0);
            }
            history.push(message);
        }
    }

    /// Starts the next turn of a task waiting for input: back to `WORKING`, not ended. Returns the state the task
    /// was in when it was not waiting for input (the caller refuses the message).
    pub(crate) fn resume(&self) -> Result<(), TaskState> {
        let mut task = self.task.lock().map_err(|_| TaskState::Unspecified)?;
        if task.status.state != TaskState::InputRequired {
            return Err(task.status.state.clone());
        }
        task.status.state = TaskState::Working;
        task.status.message = None;
        task.status.timestamp = Some(chrono::Utc::now());
        if let Ok(mut ended) = self.ended.lock() {
            *ended = None;
        }
        self.done.send_replace(false);
        Ok(())
    }

    /// The task as A2A shows it now.
    pub(crate) fn snapshot(&self) -> Option<Task> {
        self.task.lock().ok().map(|t| t.clone())
    }

    /// Changes the task's view; marks it ended when the new state is terminal.
    pub(crate) fn update(&self, change: impl FnOnce(&mut Task)) -> Option<Task> {
        let task = {
            let mut task = self.task.lock().ok()?;
            change(&mut task);
            task.status.timestamp = Some(chrono::Utc::now());
            task.clone()
        };
        if task.status.state.is_terminal() || task.status.state == TaskState::InputRequired {
            if let Ok(mut ended) = self.ended.lock() {
                ended.get_or_insert_with(Instant::now);
            }
            self.done.send_replace(true);
        }
        Some(task)
    }

    fn ended_at(&self) -> Option<Instant> {
        self.ended.lock().ok().and_then(|e| *e)
    }

    /// Sends `event` to the task's subscribers and push targets (neither waits: both are bounded).
    pub(crate) fn publish(&self, event: &StreamResponse) {
        let _ = self.events.send(event.clone());
        self.pushes.notify(event);
    }
}

/// What `ListTasks` selects (A2A's filters, already checked).
#[derive(Debug, Default)]
pub(crate) struct Filter {
    pub(crate) context_id: Option<String>,
    pub(crate) state: Option<TaskState>,
    pub(crate) after: Option<chrono::DateTime<chrono::Utc>>,
    /// Tasks created before this one (the page token: the creation order of the last task of the previous page).
    pub(crate) before: Option<u64>,
}

/// One page of `ListTasks`: the tasks, the token of the next page, and how many matched in all.
pub(crate) struct Page {
    pub(crate) tasks: Vec<Task>,
    pub(crate) next: Option<u64>,
    pub(crate) total: usize,
}

/// Why a table refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every slot holds something still in use.
    Full(usize),
    /// The context belongs to another principal.
    OtherPrincipal,
}

/// Contexts and tasks, each table bounded. A context idle past its time, or the least recently used idle one when
/// the table is full, is evicted (its LDP session closed by the caller); tasks that ended are kept for `task_ttl`,
/// and the oldest ended one makes room when the table is full. Running tasks and busy contexts are never evicted:
/// when everything is in use, the new one is refused.
pub(crate) struct Tables<U: Upstream> {
    contexts: Mutex<HashMap<String, Arc<Context<U>>>>,
    tasks: Mutex<HashMap<String, Arc<TaskEntry>>>,
    max_contexts: usize,
    max_tasks: usize,
    context_idle: Duration,
    task_ttl: Duration,
}

impl<U: Upstream> Tables<U> {
    pub(crate) fn new(max_contexts: usize, max_tasks: usize, context_idle: Duration, task_ttl: Duration) -> Self {
        Self {
            contexts: Mutex::default(),
            tasks: Mutex::default(),
            max_contexts: max_contexts.max(1),
            max_tasks: max_tasks.max(1),
            context_idle,
            task_ttl,
        }
    }

    /// The context `id` for `principal`, created when new. Returns the contexts evicted to make room (their LDP
    /// sessions are the caller's to close).
    #[allow(clippy::type_complexity)] // The context and the evicted ones; a struct would name the obvious.
    pub(crate) fn context(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> Result<(Arc<Context<U>>, Vec<Arc<Context<U>>>), Refusal> {
        let now = Instant::now();
        let mut contexts = self.contexts.lock().map_err(|_| Refusal::Full(self.max_contexts))?;
        let mut evicted = Vec::new();
        let stale: Vec<String> = contexts
            .iter()
            .filter(|(k, c)| k.as_str() != id && !c.busy() && now.duration_since(c.idle_since()) >= self.context_idle)
            .map(|(k, _)| k.clone())
            .collect();
        evicted.extend(stale.iter().filter_map(|k| contexts.remove(k)));
        if let Some(context) = contexts.get(id) {
            if context.principal.as_deref() != principal {
                return Err(Refusal::OtherPrincipal);
            }
            context.touch(now);
            return Ok((context.clone(), evicted));
        }
        if contexts.len() >= self.max_contexts {
            let lru =
                contexts.iter().filter(|(_, c)| !c.busy()).min_by_key(|(_, c)| c.idle_since()).map(|(k, _)| k.clone());
            let Some(lru) = lru else { return Err(Refusal::Full(self.max_contexts)) };
            evicted.extend(contexts.remove(&lru));
        }
        let context = Arc::new(Context {
            principal: principal.map(str::to_owned),
            opened: OnceCell::new(),
            running: AtomicUsize::new(0),
            last_used: Mutex::new(now),
        });
        contexts.insert(id.to_owned(), context.clone());
        Ok((context, evicted))
    }

    /// Forgets a context whose LDP session could not be opened (so that a later message tries again).
    pub(crate) fn forget_context(&self, id: &str) {
        if let Ok(mut contexts) = self.contexts.lock() {
            contexts.remove(id);
        }
    }

    /// Forgets a task that could not be started (its push target was refused).
    pub(crate) fn forget_task(&self, id: &str) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.remove(id);
        }
    }

    /// Adds a task, making room by dropping expired and then the oldest ended tasks.
    pub(crate) fn add_task(&self, id: &str, entry: Arc<TaskEntry>) -> Result<(), Refusal> {
        let mut tasks = self.tasks.lock().map_err(|_| Refusal::Full(self.max_tasks))?;
        let ttl = self.task_ttl;
        tasks.retain(|_, t| t.ended_at().is_none_or(|at| at.elapsed() < ttl));
        if tasks.len() >= self.max_tasks {
            let oldest = tasks.iter().filter_map(|(k, t)| t.ended_at().map(|at| (at, k.clone()))).min();
            let Some((_, oldest)) = oldest else { return Err(Refusal::Full(self.max_tasks)) };
            tasks.remove(&oldest);
        }
        tasks.insert(id.to_owned(), entry);
        Ok(())
    }

    /// The task `id` if `principal` may see it (another principal's task does not exist for it), and it has not
    /// expired.
    pub(crate) fn task(&self, id: &str, principal: Option<&str>) -> Option<Arc<TaskEntry>> {
        let tasks = self.tasks.lock().ok()?;
        let entry = tasks.get(id)?;
        let expired = entry.ended_at().is_some_and(|at| at.elapsed() >= self.task_ttl);
        (entry.principal.as_deref() == principal && !expired).then(|| entry.clone())
    }

    /// The tasks `principal` may see that match `filter`, newest first, at most `size` of them.
    pub(crate) fn list(&self, principal: Option<&str>, filter: &Filter, size: usize) -> Page {
        let Ok(tasks) = self.tasks.lock() else { return Page { tasks: Vec::new(), next: None, total: 0 } };
        let mut matching: Vec<(u64, Task)> = tasks
            .values()
            .filter(|e| e.principal.as_deref() == principal)
            .filter(|e| e.ended_at().is_none_or(|at| at.elapsed() < self.task_ttl))
            .filter_map(|e| e.snapshot().map(|t| (e.seq, t)))
            .filter(|(_, t)| filter.context_id.as_ref().is_none_or(|c| *c == t.context_id))
            .filter(|(_, t)| filter.state.as_ref().is_none_or(|s| *s == t.status.state))
            .filter(|(_, t)| filter.after.is_none_or(|after| t.status.timestamp.is_some_and(|at| at > after)))
            .collect();
        drop(tasks);
        let (total, size) = (matching.len(), size.max(1));
        matching.retain(|(seq, _)| filter.before.is_none_or(|before| *seq < before));
        matching.sort_by_key(|(seq, _)| std::cmp::Reverse(*seq));
        let next = (matching.len() > size).then(|| matching[size - 1].0);
        matching.truncate(size);
        Page { tasks: matching.into_iter().map(|(_, t)| t).collect(), next, total }
    }

    /// How many contexts and tasks are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        let contexts = self.contexts.lock().map(|c| c.len()).unwrap_or(0);
        let tasks = self.tasks.lock().map(|t| t.len()).unwrap_or(0);
        (contexts, tasks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::InProcess;

    #[test]
    fn contexts_are_bounded_and_bound_to_their_principal() {
        let tables: Tables<InProcess> = Tables::new(2, 2, Duration::from_secs(60), Duration::from_secs(60));
        let (a, _) = tables.context("a", Some("p")).unwrap();
        assert_eq!(tables.context("a", Some("q")).err(), Some(Refusal::OtherPrincipal));
        a.running.fetch_add(1, Ordering::SeqCst);
        let (b, _) = tables.context("b", Some("p")).unwrap();
        b.running.fetch_add(1, Ordering::SeqCst);
        assert_eq!(tables.context("c", None).err(), Some(Refusal::Full(2)), "both busy");
        b.running.fetch_sub(1, Ordering::SeqCst);
        let (_, evicted) = tables.context("c", None).unwrap();
        assert_eq!(evicted.len(), 1, "the idle one made room");
        assert_eq!(tables.len().0, 2);
    }

    #[test]
    fn tasks_are_bounded_and_private() {
        let tables: Tables<InProcess> = Tables::new(2, 2, Duration::from_secs(60), Duration::from_secs(60));
        let entry = |id: &str| Arc::new(TaskEntry::new(id.into(), "c".into(), Some("p".into()), "s".into(), 4));
        let one = entry("1");
        tables.add_task("1", one.clone()).unwrap();
        tables.add_task("2", entry("2")).unwrap();
        assert_eq!(tables.add_task("3", entry("3")), Err(Refusal::Full(2)), "both running");
        one.update(|t| t.status.state = TaskState::Completed);
        assert!(*one.done.borrow());
        tables.add_task("3", entry("3")).unwrap();
        assert!(tables.task("1", Some("p")).is_none(), "the ended one made room");
        assert!(tables.task("2", Some("q")).is_none(), "another principal's task is not found");
        assert!(tables.task("2", Some("p")).is_some());
    }

    #[test]
    fn lists_page_newest_first_and_only_the_callers() {
        let tables: Tables<InProcess> = Tables::new(4, 8, Duration::from_secs(60), Duration::from_secs(60));
        for (id, context, principal) in [("a", "c1", "p"), ("b", "c2", "p"), ("c", "c1", "p"), ("d", "c1", "q")] {
            let entry = Arc::new(TaskEntry::new(id.into(), context.into(), Some(principal.into()), "s".into(), 4));
            tables.add_task(id, entry).unwrap();
        }
        let ids = |page: &Page| page.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
        let all = tables.list(Some("p"), &Filter::default(), 10);
        assert_eq!((ids(&all), all.total, all.next), (vec!["c".into(), "b".into(), "a".into()], 3, None));
        let first = tables.list(Some("p"), &Filter::default(), 2);
        assert_eq!(ids(&first), ["c", "b"]);
        let rest = tables.list(Some("p"), &Filter { before: first.next, ..Filter::default() }, 2);
        assert_eq!((ids(&rest), rest.total, rest.next), (vec!["a".into()], 3, None));
        let c1 = tables.list(Some("p"), &Filter { context_id: Some("c1".into()), ..Filter::default() }, 10);
        assert_eq!(ids(&c1), ["c", "a"]);
        let ended = Filter { state: Some(TaskState::Completed), ..Filter::default() };
        assert!(tables.list(Some("p"), &ended, 10).tasks.is_empty());
        assert_eq!(ids(&tables.list(Some("q"), &Filter::default(), 0)), ["d"], "a page holds one task at least");
    }

    #[test]
    fn only_a_task_waiting_for_input_resumes_and_history_is_bounded() {
        let entry = TaskEntry::new("t".into(), "c".into(), None, "s".into(), 4);
        assert_eq!(entry.resume(), Err(TaskState::Submitted));
        entry.update(|t| t.status.state = TaskState::InputRequired);
        assert!(*entry.done.borrow(), "a question ends the turn");
        entry.resume().unwrap();
        assert!(!*entry.done.borrow());
        assert_eq!(entry.snapshot().unwrap().status.state, TaskState::Working);
        for n in 0..MAX_HISTORY + 3 {
            entry.record(Message::new(a2a::Role::User, vec![a2a::Part::text(n.to_string())]));
        }
        let history = entry.snapshot().unwrap().history.unwrap();
        assert_eq!(history.len(), MAX_HISTORY);
        assert_eq!(history[0].parts[0].as_text(), Some("3"), "the oldest went first");
        assert_eq!(history[0].task_id.as_deref(), Some("t"));
    }
}
