// A handler argument is sent by value: references are refused (and the client still exists).
use durable_runtime::durable_object;

#[durable_object]
pub struct Greeter {
    greeting: String,
}

#[durable_object]
impl Greeter {
    #[handler]
    fn handle_greet(&self, name: &str) -> String {
        format!("{} {name}", self.greeting)
    }
}

async fn call(rt: &durable_runtime::Runtime) {
    let _ = Greeter::greet(rt, "g", "you").await;
}

fn main() {
    let _ = call;
}
