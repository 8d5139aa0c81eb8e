//! The IR: the state struct as an [`Object`] (around the shared
//! [`StateStruct`]), the impl block as a [`HandlerSet`] of
//! [`Handler`]s and an optional [`AfterLoad`] hook. Built from `syn` by the `from_ast`
//! constructors, which run the rules of [`crate::validate`] and accumulate their errors. Nodes
//! keep the user's tokens (and so their spans); codegen never reads raw helper attributes.

use quote::format_ident;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, ImplItemFn, ItemImpl, ItemStruct, Pat, Type};

use crate::attrs::{HandlerArgs, Helper, ImplArgs, ObjectArgs};
use crate::errors::Errors;
use crate::flavor::Flavor;
use crate::impl_half::{block, helpers, signature};
use crate::paths::Root;
use crate::state_half::model::StateStruct;
use crate::validate;

/// The state half: a struct with named fields (or a unit struct) and its options.
pub(crate) struct Object {
    /// Where the runtime is found.
    pub(crate) root: Root,
    /// The struct; its stored name is `DurableObject::TYPE_NAME`.
    pub(crate) state: StateStruct,
    /// The declared options.
    pub(crate) options: Options,
}

/// The options declared on the struct attribute; `None` inherits the runtime's default.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Options {
    /// Nanoseconds.
    pub(crate) hibernate_after: Option<u64>,
    /// Nanoseconds.
    pub(crate) shutdown_after: Option<u64>,
    /// Nanoseconds.
    pub(crate) call_timeout: Option<u64>,
    /// At least 1.
    pub(crate) queue_capacity: Option<usize>,
    /// Key-value limits: keys, value bytes, object bytes, cache bytes.
    pub(crate) kv_max_keys: Option<u64>,
    pub(crate) kv_max_value_bytes: Option<u64>,
    pub(crate) kv_max_bytes: Option<u64>,
    pub(crate) kv_cache_bytes: Option<u64>,
}

impl Object {
    /// Builds the state half from the struct and its parsed arguments. `None` when the struct
    /// cannot be a durable object at all (tuple struct, generics); the errors say why.
    pub(crate) fn from_ast(
        item: &ItemStruct,
        args: ObjectArgs,
        errors: &mut Errors,
    ) -> Option<Self> {
        let state = StateStruct::from_ast(item, args.name, Flavor::OBJECT, errors)?;
        Some(Self {
            root: Root::new(args.krate),
            state,
            options: Options {
                hibernate_after: args.hibernate_after.map(|d| d.nanos),
                shutdown_after: args.shutdown_after.map(|d| d.nanos),
                call_timeout: args.call_timeout.map(|d| d.nanos),
                queue_capacity: args.queue_capacity.map(|c| c.value),
                kv_max_keys: args.kv_max_keys.map(|l| l.value),
                kv_max_value_bytes: args.kv_max_value_bytes.map(|l| l.value),
                kv_max_bytes: args.kv_max_bytes.map(|l| l.value),
                kv_cache_bytes: args.kv_cache_bytes.map(|l| l.value),
            },
        })
    }

    /// The name of the generated handle type, `<Name>Handle`.
    pub(crate) fn handle_ident(&self) -> Ident {
        handle_ident(&self.state.ident)
    }

    /// The name of the generated caller type, `<Name>Caller`.
    pub(crate) fn caller_ident(&self) -> Ident {
        caller_ident(&self.state.ident)
    }
}

/// `<Name>Handle`, spanned at the object's name.
fn handle_ident(object: &Ident) -> Ident {
    format_ident!("{}Handle", object.unraw(), span = object.span())
}

/// `<Name>Caller`, spanned at the object's name.
fn caller_ident(object: &Ident) -> Ident {
    format_ident!("{}Caller", object.unraw(), span = object.span())
}

/// The behaviour half: the impl block, its handlers and its after-load hook.
pub(crate) struct HandlerSet {
    /// Where the runtime is found.
    pub(crate) root: Root,
    /// The user's impl block with the helper attributes removed, re-emitted as is.
    pub(crate) item: ItemImpl,
    /// The object type as the impl block names it.
    pub(crate) self_ty: Type,
    /// The object's name (the last segment of `self_ty`).
    pub(crate) object: Ident,
    /// The path of the handle type, `self_ty` with `Handle` appended to its last segment.
    pub(crate) handle: syn::Path,
    /// The path of the caller type, `self_ty` with `Caller` appended to its last segment.
    pub(crate) caller: syn::Path,
    /// The handlers, in source order.
    pub(crate) handlers: Vec<Handler>,
    /// The `#[after_load]` hook.
    pub(crate) after_load: Option<AfterLoad>,
    /// The `#[alarm]` handlers, in source order.
    pub(crate) alarms: Vec<AlarmHandler>,
    /// `expose`: generate the table of handlers callable by name.
    pub(crate) expose: bool,
}

/// Whether a handler may change the state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// `&self`.
    Read,
    /// `&mut self`.
    Write,
}

/// One `#[handler]` method.
pub(crate) struct Handler {
    /// The method, `handle_<name>`.
    pub(crate) method: Ident,
    /// The client, `<name>`.
    pub(crate) client: Ident,
    /// From the receiver.
    pub(crate) access: Access,
    /// Whether the method is `async`.
    pub(crate) is_async: bool,
    /// Whether the method takes `&Context` first after `self`.
    pub(crate) takes_ctx: bool,
    /// The arguments the client takes (the context excluded).
    pub(crate) args: Vec<Argument>,
    /// What the method returns.
    pub(crate) output: Output,
    /// The method's doc comments, repeated on its client.
    pub(crate) docs: Vec<Attribute>,
    /// The method's `#[cfg(..)]` attributes, repeated on everything generated for it.
    pub(crate) cfgs: Vec<Attribute>,
    /// The signature broke a rule: emit the client with a body that never runs, so calls to it
    /// still resolve and the one error is the rule's.
    pub(crate) stub: bool,
    /// `#[handler(internal)]`: left out of the table of handlers callable by name.
    pub(crate) internal: bool,
}

/// One client argument.
pub(crate) struct Argument {
    /// The user's name when the pattern is a plain identifier, else `__arg<N>`.
    pub(crate) ident: Ident,
    /// The type as written.
    pub(crate) ty: Type,
}

/// A handler's result.
pub(crate) enum Output {
    /// No return type, or `()`.
    Unit,
    /// `T`: the client returns `Result<T, Error>`.
    Value(Box<Type>),
    /// `Result<T, E>`: the client returns `Result<T, Error<E>>`.
    Fallible {
        /// `T`.
        ok: Box<Type>,
        /// `E`.
        err: ErrorType,
    },
}

/// The error type of a handler's `Result`.
pub(crate) enum ErrorType {
    /// Written out: `Result<T, E>`.
    Written(Box<Type>),
    /// Behind a one-argument alias such as `anyhow::Result<T>` or `io::Result<T>` (the whole
    /// result type): the compiler finds it, through the runtime's `HandlerResult` trait.
    OfAlias(Box<Type>),
}

/// The `#[after_load]` method.
pub(crate) struct AfterLoad {
    /// Its name.
    pub(crate) method: Ident,
    /// Whether it is `async`.
    pub(crate) is_async: bool,
    /// Whether it takes `&Context`.
    pub(crate) takes_ctx: bool,
    /// Its return type (`()`, spanned at its name, when it has none).
    pub(crate) output: Type,
    /// Its `#[cfg(..)]` attributes.
    pub(crate) cfgs: Vec<Attribute>,
}

/// One `#[alarm]` method.
pub(crate) struct AlarmHandler {
    /// The method.
    pub(crate) method: Ident,
    /// The alarm's stored name: the method's name.
    pub(crate) name: String,
    /// The `Alarm<Object>` constant, the method's name in upper case.
    pub(crate) constant: Ident,
    /// Whether the method is `async`.
    pub(crate) is_async: bool,
    /// Whether it takes `&Context`.
    pub(crate) takes_ctx: bool,
    /// Whether it takes the attempt number (`attempt: u32`).
    pub(crate) takes_attempt: bool,
    /// The type of the argument stored with the alarm, if it takes one.
    pub(crate) args: Option<Type>,
    /// Its return type (`()`, spanned at its name, when it has none).
    pub(crate) output: Type,
    /// The method's doc comments, repeated on the constant.
    pub(crate) docs: Vec<Attribute>,
    /// Its `#[cfg(..)]` attributes.
    pub(crate) cfgs: Vec<Attribute>,
}

impl HandlerSet {
    /// Builds the behaviour half from the impl block. `Err` holds the impl block with helper
    /// attributes stripped when it cannot be a durable object impl at all (a trait impl, a
    /// generic impl, a self type that is not a plain path); the errors say why.
    pub(crate) fn from_ast(
        mut item: ItemImpl,
        args: ImplArgs,
        errors: &mut Errors,
    ) -> Result<Self, Box<ItemImpl>> {
        let marked = helpers::strip_helpers::<Helper>(&mut item);
        let Some(object) = block::impl_shape(&item, Flavor::OBJECT, errors) else {
            return Err(Box::new(item));
        };

        let mut handlers = Vec::new();
        let mut after_load: Option<AfterLoad> = None;
        // The first hook's name, even if it broke a rule: a second one is still one too many.
        let mut first_after_load: Option<Ident> = None;
        let mut alarms = Vec::new();
        for marked in &marked {
            for (_, attr) in &marked.helpers {
                Helper::check_bare(attr, errors);
            }
            let Some(method) = helpers::marked_method(&item, marked, errors) else {
                continue;
            };
            let Some((helper, attr)) = helpers::one_helper(&marked.helpers, errors) else {
                continue;
            };
            match helper {
                Helper::Handler => {
                    let options = HandlerArgs::parse(attr, errors);
                    if let Some(mut handler) = Handler::from_fn(method, &object, errors) {
                        handler.internal = options.internal;
                        handlers.push(handler);
                    }
                }
                Helper::AfterLoad => {
                    let hook = AfterLoad::from_fn(method, errors);
                    if let Some(first) = &first_after_load {
                        validate::single_after_load(first, &method.sig.ident, errors);
                    } else {
                        first_after_load = Some(method.sig.ident.clone());
                        after_load = hook;
                    }
                }
                Helper::Alarm => {
                    if let Some(alarm) = AlarmHandler::from_fn(method, errors) {
                        alarms.push(alarm);
                    }
                }
            }
        }

        let handlers = validate::client_names(handlers, &item, &object, errors);
        let alarms = validate::alarm_names(alarms, &item, &object, errors);
        let self_ty = (*item.self_ty).clone();
        let handle = sibling_path(&self_ty, handle_ident(&object));
        let caller = sibling_path(&self_ty, caller_ident(&object));
        Ok(Self {
            root: Root::new(args.krate),
            expose: args.expose,
            item,
            self_ty,
            object,
            handle,
            caller,
            handlers,
            after_load,
            alarms,
        })
    }
}

/// `self_ty` with its last segment renamed to `name` (`<Name>Handle`, `<Name>Caller`).
fn sibling_path(self_ty: &Type, name: Ident) -> syn::Path {
    let mut path = match self_ty {
        Type::Path(path) => path.path.clone(),
        _ => syn::Path::from(name.clone()),
    };
    if let Some(last) = path.segments.last_mut() {
        last.ident = name;
    }
    path
}

/// The `#[cfg(..)]` attributes among `attrs`.
fn cfgs(attrs: &[Attribute]) -> Vec<Attribute> {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .cloned()
        .collect()
}

impl Handler {
    /// Reads one `#[handler]` method. `None` when no client can be generated for it (no
    /// valid client name, or a signature no client can mirror); the errors say why.
    fn from_fn(method: &ImplItemFn, object: &Ident, errors: &mut Errors) -> Option<Self> {
        let sig = &method.sig;
        let client = validate::handler_name(&sig.ident, object, errors);
        let mut stub = !signature::plain_signature(sig, Helper::Handler, Flavor::OBJECT, errors);
        let mirrorable = validate::no_generics(&sig.generics, Helper::Handler, errors);
        let access = validate::handler_receiver(sig, errors);
        stub |= access.is_none();

        let mut takes_ctx = false;
        let mut args = Vec::new();
        let mut mirrorable = mirrorable;
        for (position, input) in sig.inputs.iter().enumerate() {
            let FnArg::Typed(typed) = input else { continue };
            let position = position - usize::from(sig.receiver().is_some());
            match validate::context_argument(&typed.ty, position, errors) {
                validate::ContextArg::First => {
                    takes_ctx = true;
                    continue;
                }
                validate::ContextArg::Misplaced => {
                    stub = true;
                    continue;
                }
                validate::ContextArg::No => {}
            }
            match validate::argument_type(&typed.ty, errors) {
                validate::TypeVerdict::Ok => {}
                validate::TypeVerdict::Broken => stub = true,
                validate::TypeVerdict::Unmirrorable => mirrorable = false,
            }
            args.push(Argument {
                ident: argument_ident(&typed.pat, args.len()),
                ty: (*typed.ty).clone(),
            });
        }

        let (output, verdict) = validate::handler_output(&sig.output, errors);
        match verdict {
            validate::TypeVerdict::Ok => {}
            validate::TypeVerdict::Broken => stub = true,
            validate::TypeVerdict::Unmirrorable => mirrorable = false,
        }

        if !mirrorable {
            return None;
        }
        Some(Self {
            method: sig.ident.clone(),
            client: client?,
            access: access.unwrap_or(Access::Write),
            is_async: sig.asyncness.is_some(),
            takes_ctx,
            args,
            output,
            docs: method
                .attrs
                .iter()
                .filter(|attr| attr.path().is_ident("doc"))
                .cloned()
                .collect(),
            cfgs: cfgs(&method.attrs),
            stub,
            internal: false,
        })
    }
}

/// The client's name for an argument: the user's when the pattern is a plain identifier
/// (without `ref` or a subpattern, and not one of the `__` names generated code uses), else
/// `__arg<N>`.
fn argument_ident(pat: &Pat, index: usize) -> Ident {
    if let Pat::Ident(pat) = pat
        && pat.by_ref.is_none()
        && pat.subpat.is_none()
        && !pat.ident.unraw().to_string().starts_with("__")
    {
        return pat.ident.clone();
    }
    format_ident!("__arg{}", index, span = pat.span())
}

impl AfterLoad {
    /// Reads the `#[after_load]` method. `None` when its signature is wrong; the errors say
    /// how.
    fn from_fn(method: &ImplItemFn, errors: &mut Errors) -> Option<Self> {
        let sig = &method.sig;
        let plain = signature::plain_signature(sig, Helper::AfterLoad, Flavor::OBJECT, errors);
        let generics = validate::no_generics(&sig.generics, Helper::AfterLoad, errors);
        let receiver = validate::hook_receiver(sig, Helper::AfterLoad, errors);
        let takes_ctx = validate::after_load_inputs(sig, errors);
        if !(plain && generics && receiver) {
            return None;
        }
        Some(Self {
            method: sig.ident.clone(),
            is_async: sig.asyncness.is_some(),
            takes_ctx: takes_ctx?,
            output: hook_output(sig),
            cfgs: cfgs(&method.attrs),
        })
    }
}

/// The return type of a hook or alarm handler; `()` spanned at its name when it has none.
fn hook_output(sig: &syn::Signature) -> Type {
    match &sig.output {
        syn::ReturnType::Default => syn::parse_quote_spanned!(sig.ident.span()=> ()),
        syn::ReturnType::Type(_, ty) => (**ty).clone(),
    }
}

impl AlarmHandler {
    /// Reads one `#[alarm]` method. `None` when its signature is wrong; the errors say how.
    fn from_fn(method: &ImplItemFn, errors: &mut Errors) -> Option<Self> {
        let sig = &method.sig;
        let plain = signature::plain_signature(sig, Helper::Alarm, Flavor::OBJECT, errors);
        let generics = validate::no_generics(&sig.generics, Helper::Alarm, errors);
        let receiver = validate::hook_receiver(sig, Helper::Alarm, errors);
        let inputs = validate::alarm_inputs(sig, errors);
        if !(plain && generics && receiver) {
            return None;
        }
        let validate::AlarmInputs {
            takes_ctx,
            args,
            takes_attempt,
        } = inputs?;
        let name = sig.ident.unraw().to_string();
        Some(Self {
            method: sig.ident.clone(),
            constant: Ident::new(&name.to_uppercase(), sig.ident.span()),
            name,
            is_async: sig.asyncness.is_some(),
            takes_ctx,
            takes_attempt,
            args,
            output: hook_output(sig),
            docs: method
                .attrs
                .iter()
                .filter(|attr| attr.path().is_ident("doc"))
                .cloned()
                .collect(),
            cfgs: cfgs(&method.attrs),
        })
    }
}
