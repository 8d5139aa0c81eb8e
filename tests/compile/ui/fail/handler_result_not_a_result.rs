// A handler's result named `Result` with one type argument must be an alias of
// `Result<T, E>`: its error type is found through it.
use durable_runtime::durable_object;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Result<T>(T);

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_get(&self) -> Result<i64> {
        Result(self.count)
    }
}

fn main() {}
