//! Runs `examples/front_door.rs` as it is (its `main` asserts the conversation's second answer).

#[path = "../examples/front_door.rs"]
mod front_door;

#[test]
fn the_front_door_example_runs() {
    front_door::main().expect("the example fails");
}
