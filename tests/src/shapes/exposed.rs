//! `expose` with every handler shape: sync and async, with and without context, fallible
//! through a written error or an alias, arguments with non-identifier names, `Self` in an
//! argument type, and an internal handler whose error is not `Serialize`.

use durable_runtime::{Context, Exposed, durable_object};

pub struct NotJson;

#[durable_object]
#[derive(Clone)]
pub struct Shapes {
    n: u64,
}

type Outcome<T> = Result<T, String>;

#[durable_object(expose)]
impl Shapes {
    #[handler]
    fn handle_plain(&self) -> u64 {
        self.n
    }

    #[handler]
    async fn handle_later(&mut self, _ctx: &Context, r#type: u64) -> Result<u64, String> {
        self.n = r#type;
        Ok(self.n)
    }

    #[handler]
    fn handle_aliased(&mut self, (a, b): (u64, u64)) -> Outcome<u64> {
        Ok(a + b)
    }

    #[handler]
    fn handle_replace(&mut self, with: Option<Self>) {
        if let Some(with) = with {
            self.n = with.n;
        }
    }

    #[handler(internal)]
    fn handle_secret(&mut self) -> Result<(), NotJson> {
        Ok(())
    }
}

/// Checks what the generated code does (run by this package's tests).
pub fn runs() {
    let names: Vec<_> = Shapes::HANDLERS.iter().map(|h| h.name).collect();
    assert_eq!(names, ["plain", "later", "aliased", "replace"]);
    assert_eq!(Shapes::HANDLERS[1].arguments, ["type"]);
}
