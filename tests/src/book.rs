//! The user guide's Rust snippets, compiled (and, unless marked `no_run`, run) as doctests: one
//! item per chapter of `book/src`, plus the README and the usage rules.

#[doc = include_str!("../../book/src/introduction.md")]
pub mod introduction {}

#[doc = include_str!("../../book/src/getting-started.md")]
pub mod getting_started {}

#[doc = include_str!("../../book/src/objects.md")]
pub mod objects {}

#[doc = include_str!("../../book/src/handlers.md")]
pub mod handlers {}

#[doc = include_str!("../../book/src/idempotency.md")]
pub mod idempotency {}

#[doc = include_str!("../../book/src/exposed.md")]
pub mod exposed {}

#[doc = include_str!("../../book/src/serving.md")]
pub mod serving {}

#[doc = include_str!("../../book/src/console.md")]
pub mod console {}

#[doc = include_str!("../../book/src/lifecycle.md")]
pub mod lifecycle {}

#[doc = include_str!("../../book/src/alarms.md")]
pub mod alarms {}

#[doc = include_str!("../../book/src/kv.md")]
pub mod kv {}

#[doc = include_str!("../../book/src/storage.md")]
pub mod storage {}

#[doc = include_str!("../../book/src/cluster.md")]
pub mod cluster {}

#[doc = include_str!("../../book/src/testing.md")]
pub mod testing {}

#[doc = include_str!("../../book/src/patterns.md")]
pub mod patterns {}

#[doc = include_str!("../../book/src/errors.md")]
pub mod errors {}

#[doc = include_str!("../../book/src/observability.md")]
pub mod observability {}

#[doc = include_str!("../../book/src/cli.md")]
pub mod cli {}

#[doc = include_str!("../../book/src/configuration.md")]
pub mod configuration {}

#[doc = include_str!("../../book/src/internals.md")]
pub mod internals {}

#[doc = include_str!("../../book/src/coming-from-cloudflare.md")]
pub mod coming_from_cloudflare {}

#[doc = include_str!("../../book/src/coming-from-elixir.md")]
pub mod coming_from_elixir {}

#[doc = include_str!("../../book/src/coming-from-agentkernel.md")]
pub mod coming_from_agentkernel {}

#[doc = include_str!("../../book/src/fsm/concepts.md")]
pub mod fsm_concepts {}

#[doc = include_str!("../../book/src/fsm/outcomes.md")]
pub mod fsm_outcomes {}

#[doc = include_str!("../../book/src/fsm/signals.md")]
pub mod fsm_signals {}

#[doc = include_str!("../../book/src/fsm/children.md")]
pub mod fsm_children {}

#[doc = include_str!("../../book/src/fsm/concurrency.md")]
pub mod fsm_concurrency {}

#[doc = include_str!("../../book/src/fsm/objects.md")]
pub mod fsm_objects {}

#[doc = include_str!("../../book/src/fsm/rate-limits.md")]
pub mod fsm_rate_limits {}
#[doc = include_str!("../../book/src/fsm/jobs.md")]
pub mod fsm_jobs {}

#[doc = include_str!("../../book/src/fsm/operations.md")]
pub mod fsm_operations {}

#[doc = include_str!("../../book/src/fsm/sqlite.md")]
pub mod fsm_sqlite {}

#[doc = include_str!("../../book/src/fsm/coming-from-gen-durable.md")]
pub mod fsm_coming_from_gen_durable {}

#[doc = include_str!("../../README.md")]
pub mod readme {}

#[doc = include_str!("../../usage-rules.md")]
pub mod usage_rules {}

/// The usage rules published with `durable-runtime` are the repository's.
#[cfg(test)]
mod published {
    #[test]
    fn the_crate_ships_the_usage_rules_of_the_repository() {
        assert_eq!(
            include_str!("../../durable-runtime/usage-rules.md"),
            include_str!("../../usage-rules.md"),
            "copy usage-rules.md to durable-runtime/usage-rules.md"
        );
    }
}
