// Handlers of every accepted shape: argument patterns, owned std and custom serde types,
// `Self` in types, the context by any path, sync and async, unit / value / `Result` results,
// path-qualified helper attributes, doc comments and `#[cfg]` on handlers.
#![deny(warnings, missing_docs)]
//! Handler shapes.

use std::collections::BTreeMap;

use durable_runtime::{Context, Error, MemoryStorage, Runtime, durable_object};
use serde::{Deserialize, Serialize};

/// A custom argument type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// X.
    pub x: i32,
    /// Y.
    pub y: i32,
}

/// A custom error type.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// Too far.
    TooFar(i32),
}

/// A custom unit-like argument.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub enum Mode {
    /// Add.
    Add,
    /// Replace.
    Replace,
}

/// Exercises every handler shape.
#[durable_object(call_timeout = "30s")]
pub struct Shapes {
    points: Vec<Point>,
    bytes: Vec<u8>,
    notes: BTreeMap<String, String>,
    #[field(default = Some(Point { x: 0, y: 0 }))]
    origin: Option<Point>,
    /// Another copy of the state's shape, to use `Self` in types.
    #[serde(skip)]
    previous: Option<Box<Self>>,
}

#[durable_object]
impl Shapes {
    /// Tuple and wildcard patterns.
    #[handler]
    fn handle_add_pair(&mut self, (x, y): (i32, i32), _: u8, mut scale: i32) -> usize {
        scale += 1;
        self.points.push(Point {
            x: x * scale,
            y: y * scale,
        });
        self.points.len()
    }

    /// A struct pattern.
    #[handler]
    fn handle_add_point(&mut self, Point { x, y }: Point, mode: Mode) -> Vec<Point> {
        if let Mode::Replace = mode {
            self.points.clear();
        }
        self.points.push(Point { x, y });
        self.points.clone()
    }

    #[handler]
    fn handle_set_bytes(&mut self, bytes: Vec<u8>) {
        self.bytes = bytes;
    }

    #[handler]
    async fn handle_bytes(&self) -> Vec<u8> {
        self.bytes.clone()
    }

    #[handler]
    fn handle_note(&mut self, key: String, value: Option<String>) -> Option<String> {
        match value {
            Some(value) => self.notes.insert(key, value),
            None => self.notes.remove(&key),
        }
    }

    #[handler]
    fn handle_origin(&self) -> Option<Point> {
        self.origin.clone()
    }

    /// The context by its full path, and a fallible async handler.
    #[durable_runtime::handler]
    async fn handle_move_origin(
        &mut self,
        ctx: &durable_runtime::Context,
        to: Point,
    ) -> std::result::Result<Point, Refused> {
        assert!(!ctx.id().is_empty());
        if to.x.abs() > 100 {
            return Err(Refused::TooFar(to.x));
        }
        self.origin = Some(to.clone());
        Ok(to)
    }

    /// An unused context and a `()` result.
    #[allow(clippy::unused_unit)]
    #[handler]
    fn handle_touch(&mut self, _ctx: &Context) -> () {}

    /// `Result<(), E>`.
    #[handler]
    fn handle_clear(&mut self) -> Result<(), String> {
        self.points.clear();
        Ok(())
    }

    /// `Self` in the argument and result types.
    #[handler]
    fn handle_swap(&mut self, other: Self) -> Self {
        let previous = std::mem::replace(self, other);
        self.previous = Some(Box::new(Self {
            previous: None,
            ..Self::default()
        }));
        previous
    }

    /// The long form of `&self`.
    #[allow(clippy::needless_arbitrary_self_type)]
    #[handler]
    fn handle_count(self: &Self) -> usize {
        self.points.len()
    }

    /// Only on unix.
    #[cfg(unix)]
    #[handler]
    fn handle_platform(&self) -> String {
        "unix".to_owned()
    }

    /// Everywhere else.
    #[cfg(not(unix))]
    #[handler]
    fn handle_platform(&self) -> String {
        "other".to_owned()
    }
}

// `Shapes` is stored, so its `Self` argument must be sendable too.
impl Clone for Shapes {
    fn clone(&self) -> Self {
        Self {
            points: self.points.clone(),
            bytes: self.bytes.clone(),
            notes: self.notes.clone(),
            origin: self.origin.clone(),
            previous: None,
        }
    }
}

/// Checks what the generated code does (run by this package's tests).
pub async fn runs() {
    let rt = Runtime::new(MemoryStorage::new());
    let id = "s";
    assert_eq!(Shapes::add_pair(&rt, id, (1, 2), 0, 1).await.unwrap(), 1);
    let points = Shapes::add_point(&rt, id, Point { x: 5, y: 6 }, Mode::Replace)
        .await
        .unwrap();
    assert_eq!(points, [Point { x: 5, y: 6 }]);
    let _ = Mode::Add;
    Shapes::set_bytes(&rt, id, vec![1, 2, 3]).await.unwrap();
    assert_eq!(Shapes::bytes(&rt, id).await.unwrap(), [1, 2, 3]);
    assert_eq!(
        Shapes::note(&rt, id, "k".into(), Some("v".into()))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        Shapes::origin(&rt, id).await.unwrap(),
        Some(Point { x: 0, y: 0 })
    );
    assert!(matches!(
        Shapes::move_origin(&rt, id, Point { x: 500, y: 0 }).await,
        Err(Error::Handler(Refused::TooFar(500)))
    ));
    let handle = Shapes::handle(&rt, id);
    assert_eq!(
        handle.move_origin(Point { x: 1, y: 1 }).await.unwrap(),
        Point { x: 1, y: 1 }
    );
    handle.touch().await.unwrap();
    handle.clear().await.unwrap();
    assert_eq!(handle.count().await.unwrap(), 0);
    let before = handle.swap(Shapes::default()).await.unwrap();
    assert_eq!(before.bytes, [1, 2, 3]);
    assert!(!handle.platform().await.unwrap().is_empty());
}
