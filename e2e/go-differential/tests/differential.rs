//! Each subject through both sides: 10,000 generated cases per subject with a fixed seed,
//! compared byte for byte with Go's answers. Builds the Go reference program on first use (Go on
//! PATH is required; the failure says what to install). A failure prints the smallest differing
//! cases: the input, Go's answer and ours. A longer run with a random seed:
//! `cargo run -p go-differential -- --cases 1000000`.

const CASES: usize = 10_000;
const SEED: u64 = 0x5eed_c0de;

fn subject(name: &str) {
    let reference = go_differential::Reference::build().unwrap_or_else(|e| panic!("{e}"));
    let outcome =
        go_differential::run(&reference, name, SEED, CASES).unwrap_or_else(|e| panic!("{e}"));
    println!("{outcome}");
    assert_eq!(outcome.cases, CASES, "{outcome}");
    assert!(
        outcome.differences.is_empty(),
        "differences from Go (smallest first):\n{outcome}"
    );
}

#[test]
fn strategy_templates_render_as_go_text_template_with_slim_sprig() {
    subject("template");
}

/// Every slim-sprig function and Go builtin, every context value (integers, floats, lists, maps,
/// nulls), numeric literals, every `printf` verb and flag, `and`/`or`, ranges over maps.
#[test]
fn any_template_renders_as_go_text_template_with_slim_sprig() {
    subject("template-full");
}

#[test]
fn plan_schedules_fire_when_robfig_cron_fires() {
    subject("cron");
}

#[test]
fn durations_parse_and_print_as_go_does() {
    subject("duration");
}

#[test]
fn the_config_hash_is_upstreams() {
    subject("hash");
}
