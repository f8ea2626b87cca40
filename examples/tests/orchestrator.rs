//! Runs `examples/orchestrator.rs` as it is (its `main` asserts the sub-task went to the better delegate and its
//! answer reached the model).
#[path = "../examples/orchestrator.rs"]
mod orchestrator;

#[test]
fn the_orchestrator_example_runs() {
    orchestrator::main().expect("the example fails");
}
