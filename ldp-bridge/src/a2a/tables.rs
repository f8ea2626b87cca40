//! The A2A server's state, bounded: contexts (one LDP session each) and tasks (each one LDP task).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2a::{Task, TaskState, TaskStatus};
use ldp_session::TaskKey;
use ldp_session::runtime::Client;
use tokio::sync::{OnceCell, watch};

use crate::upstream::Upstream;

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

/// A task: its A2A view (updated as the LDP task runs), its LDP key once submitted, and whether it has ended.
pub(crate) struct TaskEntry {
    pub(crate) principal: Option<String>,
    pub(crate) task: Mutex<Task>,
    pub(crate) key: Mutex<Option<TaskKey>>,
    pub(crate) cancel_requested: AtomicBool,
    /// `true` once the task reached a terminal state.
    pub(crate) done: watch::Sender<bool>,
    ended: Mutex<Option<Instant>>,
}

impl TaskEntry {
    pub(crate) fn new(id: String, context_id: String, principal: Option<String>) -> Self {
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
            task: Mutex::new(task),
            key: Mutex::new(None),
            cancel_requested: AtomicBool::new(false),
            done: watch::channel(false).0,
            ended: Mutex::new(None),
        }
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
        if task.status.state.is_terminal() {
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
        let entry = |id: &str| Arc::new(TaskEntry::new(id.into(), "c".into(), Some("p".into())));
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
}
