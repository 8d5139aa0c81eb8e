//! Which macro is expanding: the words its messages use. The two attribute macros share the
//! machinery of the struct half and of the impl block's shape, and differ only in these words.

/// The words one macro's messages use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Flavor {
    /// The attribute, as written in messages: `#[durable_object]`.
    pub(crate) attribute: &'static str,
    /// What the macro declares: `object`, as in "a durable object".
    pub(crate) noun: &'static str,
    /// The type name the examples of messages use: `Counter`.
    pub(crate) example: &'static str,
    /// Why a generic state has no meaning, in parentheses after "cannot be generic".
    pub(crate) stored_under: &'static str,
    /// The state struct as the impl half's messages call it.
    pub(crate) state_struct: &'static str,
    /// The state struct as the impl block's shape rule calls it.
    pub(crate) impl_target: &'static str,
    /// What calls the marked methods: "the runtime", "the engine".
    pub(crate) caller: &'static str,
}

impl Flavor {
    /// `#[durable_object]`.
    pub(crate) const OBJECT: Self = Self {
        attribute: "durable_object",
        noun: "object",
        example: "Counter",
        stored_under: "each object type is stored under one name",
        state_struct: "the state struct",
        impl_target: "the object's struct",
        caller: "the runtime",
    };

    /// `#[durable_fsm]`.
    pub(crate) const FSM: Self = Self {
        attribute: "durable_fsm",
        noun: "FSM",
        example: "Order",
        stored_under: "its instances are stored under one name",
        state_struct: "the FSM's state struct",
        impl_target: "the FSM's state struct",
        caller: "the engine",
    };

    /// `#[job]`.
    pub(crate) const JOB: Self = Self {
        attribute: "job",
        noun: "job",
        example: "SendEmail",
        stored_under: "its instances are stored under one name",
        state_struct: "the job's struct",
        impl_target: "the job's struct",
        caller: "the engine",
    };
}
