// Several objects in one module and in nested modules, with every visibility, unit and empty
// structs, and empty impl blocks: no name clashes, no warnings, every public item documented.
#![deny(warnings, missing_docs)]
//! Many objects.

use durable_runtime::{DurableObject, MemoryStorage, Runtime, durable_object};

/// First.
#[durable_object]
pub struct First {
    value: u32,
}

#[durable_object]
impl First {
    #[handler]
    fn handle_get(&self) -> u32 {
        self.value
    }
}

/// Second: its clients share names with `First`'s, on another type.
#[durable_object(name = "second-object")]
pub(crate) struct Second {
    value: u32,
}

#[durable_object]
impl Second {
    #[handler]
    fn handle_get(&self) -> u32 {
        self.value + 1
    }
}

/// An empty state.
#[durable_object]
pub struct Empty {}

#[durable_object]
impl Empty {}

/// A unit state.
#[durable_object]
struct Unit;

#[durable_object]
impl Unit {
    #[handler]
    fn handle_ping(&self) -> Pong {
        "pong".to_owned()
    }
}

/// A reply type behind an alias.
type Pong = String;

/// Its handlers are declared in another module.
#[durable_object]
pub struct Third {
    value: u32,
}

mod nested {
    use durable_runtime::durable_object;

    /// Private to the module: its handle is too.
    #[durable_object]
    pub(super) struct Inner {
        pub(super) hits: u64,
    }

    #[durable_object]
    impl Inner {
        #[handler]
        fn handle_hit(&mut self) -> u64 {
            self.hits += 1;
            self.hits
        }
    }

    pub(super) mod deeper {
        use durable_runtime::durable_object;

        /// Public in a private module.
        #[durable_object]
        pub struct Deep {}

        #[durable_object]
        impl Deep {}
    }
}

/// Handlers declared in another module than the struct.
mod elsewhere {
    use durable_runtime::durable_object;

    #[durable_object]
    impl super::Third {
        #[handler]
        fn handle_set(&mut self, value: u32) {
            self.value = value;
        }
    }
}

async fn super_third(rt: &Runtime) {
    let handle: ThirdHandle = Third::handle(rt, "t");
    handle.set(5).await.unwrap();
}

/// Checks what the generated code does (run by this package's tests).
pub async fn runs() {
    let rt = Runtime::new(MemoryStorage::new());
    assert_eq!(First::get(&rt, "a").await.unwrap(), 0);
    assert_eq!(Second::get(&rt, "a").await.unwrap(), 1);
    assert_eq!(Second::TYPE_NAME, "second-object");
    assert_eq!(Unit::ping(&rt, "u").await.unwrap(), "pong");
    assert_eq!(nested::Inner::hit(&rt, "i").await.unwrap(), 1);
    assert_eq!(nested::Inner::handle(&rt, "i").hit().await.unwrap(), 2);
    Third::set(&rt, "t", 3).await.unwrap();
    super_third(&rt).await;
    sibling_tally(&rt).await;
    let _ = (Empty::handle(&rt, "e"), nested::deeper::Deep::default());
}

/// Handlers declared in a sibling module of the struct's.
mod sibling_state {
    use durable_runtime::durable_object;

    #[durable_object]
    pub struct Tally {
        // Read by the handlers in the sibling module.
        pub(crate) count: u32,
    }
}

mod sibling_logic {
    use durable_runtime::durable_object;

    #[durable_object]
    impl super::sibling_state::Tally {
        #[handler]
        fn handle_add(&mut self, by: u32) -> u32 {
            self.count += by;
            self.count
        }
    }
}

async fn sibling_tally(rt: &Runtime) {
    let handle = sibling_state::Tally::handle(rt, "t");
    assert_eq!(handle.add(2).await.unwrap(), 2);
}
