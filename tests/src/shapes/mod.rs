//! The shapes the workspace's attribute macros must accept. Each module is one case, written
//! as a user would (its own lints denied, the runtime reached through public paths only), built
//! with the workspace, and its `runs` function, run by the tests below, checks what the
//! generated code does.
//!
//! The cases that must fail to compile are trybuild's, in the `durable-compile-tests` package
//! (`tests/compile`), with their expected errors beside them.

pub mod alarm_args;
pub mod alarms;
pub mod crate_override;
pub mod exposed;
pub mod fsm_shapes;
pub mod handler_shapes;
pub mod hygiene;
pub mod job_shapes;
pub mod many_objects;

#[cfg(test)]
mod run {
    #[tokio::test]
    async fn alarm_args() {
        super::alarm_args::runs().await;
    }

    #[tokio::test]
    async fn alarms() {
        super::alarms::runs().await;
    }

    #[tokio::test]
    async fn crate_override() {
        super::crate_override::runs().await;
    }

    #[test]
    fn exposed() {
        super::exposed::runs();
    }

    #[test]
    fn fsm_shapes() {
        super::fsm_shapes::runs();
    }

    #[tokio::test]
    async fn handler_shapes() {
        super::handler_shapes::runs().await;
    }

    #[tokio::test]
    async fn hygiene() {
        super::hygiene::runs().await;
    }

    #[test]
    fn job_shapes() {
        super::job_shapes::runs();
    }

    #[tokio::test]
    async fn many_objects() {
        super::many_objects::runs().await;
    }
}
