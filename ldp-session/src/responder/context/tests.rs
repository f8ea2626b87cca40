use ldp_types::PayloadMode;
use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    /// A turn with an input this long, an output or not, a provenance or not.
    Push { input: usize, output: bool, provenance: bool },
    /// The result of the kept turn this far from the newest withdrawn.
    Withdraw(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..600usize, any::<bool>(), any::<bool>())
            .prop_map(|(input, output, provenance)| Op::Push { input, output, provenance }),
        1 => (0..8usize).prop_map(Op::Withdraw),
    ]
}

/// The context's rule as a plain queue, copied whole for each history: oldest turns dropped first, within the count
/// and the bytes, a turn over the bytes emptying it.
#[derive(Default)]
struct Model {
    kept: VecDeque<(Turn, usize)>,
    bytes: usize,
}

impl Model {
    fn push(&mut self, turn: Turn, bytes: usize, max_turns: usize, max_bytes: usize) {
        if max_turns == 0 {
            return;
        }
        if bytes > max_bytes {
            *self = Self::default();
            return;
        }
        while self.kept.len() >= max_turns || self.bytes + bytes > max_bytes {
            let Some((_, old)) = self.kept.pop_front() else { break };
            self.bytes -= old;
        }
        self.bytes += bytes;
        self.kept.push_back((turn, bytes));
    }

    fn withdraw(&mut self, task_id: &str) {
        if let Some((turn, bytes)) = self.kept.iter_mut().rev().find(|(t, _)| t.task_id == task_id) {
            turn.output = None;
            self.bytes = self.bytes - *bytes + turn.size();
            *bytes = turn.size();
        }
    }

    fn turns(&self) -> Vec<Turn> {
        self.kept.iter().map(|(t, _)| t.clone()).collect()
    }
}

proptest! {
    /// Each history is the model's turns at the moment it was taken, and stays so while the context goes on; the
    /// log the histories share holds no more than the bounds.
    #[test]
    fn histories_are_the_kept_turns_and_never_change(
        ops in proptest::collection::vec(op(), 0..80),
        max_turns in 0..6usize,
        max_bytes in 100..3000usize,
    ) {
        let (mut context, mut model) = (Context::default(), Model::default());
        let mut taken: Vec<(History, Vec<Turn>)> = Vec::new();
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                Op::Push { input, output, provenance } => {
                    let output = output.then(|| RawJson::from(format!("{n}")));
                    let turn = Turn::new(format!("t{n}"), "echo", "x".repeat(input), output);
                    let provenance =
                        provenance.then(|| std::sync::Arc::new(Provenance::new("ldp:delegate:d", "m", PayloadMode::Text)));
                    let bytes = turn.size() + if provenance.is_some() { 256 } else { 0 };
                    model.push(turn.clone(), bytes, max_turns, max_bytes);
                    context.push(turn, provenance, max_turns, max_bytes);
                }
                Op::Withdraw(back) => {
                    let Some(id) = model.kept.iter().rev().nth(back).map(|(t, _)| t.task_id.clone()) else { continue };
                    model.withdraw(&id);
                    context.withdraw_result(&id);
                }
            }
            let history = context.snapshot();
            prop_assert_eq!(history.iter().cloned().collect::<Vec<_>>(), model.turns());
            prop_assert_eq!(history.len(), model.kept.len());
            prop_assert_eq!(history.last(), model.kept.back().map(|(t, _)| t));
            prop_assert_eq!(context.bytes, model.bytes);
            prop_assert!(context.bytes + context.dropped_bytes <= max_bytes, "the log holds more than the bound");
            prop_assert!(context.view.log.len() <= (2 * max_turns).max(MIN_LOG), "log of {}", context.view.log.len());
            taken.push((history, model.turns()));
            for (earlier, turns) in &taken {
                prop_assert_eq!(&earlier.iter().cloned().collect::<Vec<_>>(), turns);
            }
        }
    }
}

#[test]
fn a_history_of_turns_reads_them_oldest_first_from_both_ends() {
    let turns = [Turn::new("a", "s", "1", None), Turn::new("b", "s", "2", None), Turn::new("c", "s", "3", None)];
    let history = History::from_turns(turns.clone());
    assert_eq!(history.iter().len(), 3);
    assert_eq!(history.iter().rev().map(|t| t.task_id.as_str()).collect::<Vec<_>>(), ["c", "b", "a"]);
    assert_eq!((&history).into_iter().cloned().collect::<Vec<_>>(), turns);
    assert_eq!(history.last().map(|t| t.task_id.as_str()), Some("c"));
    assert_eq!(history, History::from_turns(turns));
    assert!(History::default().is_empty() && History::default().last().is_none());
}
