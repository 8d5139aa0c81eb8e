//! The rules of the DSL, one documented function per rule. Each rule records its errors in the
//! [`Errors`] accumulator, on the narrowest span and saying what to write instead, and returns
//! what the model needs to carry on: no rule stops the others.

use std::collections::HashMap;

use syn::ext::IdentExt;
use syn::visit::{self, Visit};
use syn::{
    GenericArgument, GenericParam, Generics, Ident, ItemImpl, Path, PathArguments, ReceiverKind,
    ReturnType, Signature, Type,
};

use crate::attrs::Helper;
use crate::errors::Errors;
use crate::impl_half::block;
use crate::impl_half::helpers::HelperAttr;
use crate::impl_half::signature;
use crate::model::{Access, AlarmHandler, ErrorType, Handler, Output};

/// What a rule found wrong with a type in a signature, from mild to severe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TypeVerdict {
    /// Nothing.
    Ok,
    /// Refused, but a client with this type still compiles: emit a stub client.
    Broken,
    /// Refused, and no client can repeat this type (`impl Trait`, a named lifetime): emit no
    /// client.
    Unmirrorable,
}

/// An object has at most one `#[after_load]` hook.
pub(crate) fn single_after_load(first: &Ident, second: &Ident, errors: &mut Errors) {
    errors.spanned(
        second,
        format!(
            "an object has at most one `#[after_load]` hook, and `{first}` is already one: merge `{second}` into it"
        ),
    );
}

/// A handler is named `handle_<name>`; its client is `<Object>::<name>`. Returns the
/// client's name.
///
/// The prefix keeps the handler (which runs inside the object) and the client (which sends it
/// a call) apart, in the code and in readers' heads.
pub(crate) fn handler_name(method: &Ident, object: &Ident, errors: &mut Errors) -> Option<Ident> {
    let name = method.unraw().to_string();
    match name.strip_prefix("handle_") {
        None => {
            errors.spanned(
                method,
                format!(
                    "handler methods are named `handle_<name>`; rename `{name}` to `handle_{name}` (its client is `{object}::{name}`)"
                ),
            );
            None
        }
        Some("") => {
            errors.spanned(
                method,
                format!(
                    "`handle_` needs a name after the prefix: `handle_<name>` gets the client `{object}::<name>`"
                ),
            );
            None
        }
        Some(rest) => {
            if syn::parse_str::<Ident>(rest).is_ok() {
                Some(Ident::new(rest, method.span()))
            } else {
                errors.spanned(
                    method,
                    format!(
                        "the client of `{name}` would be `{object}::{rest}`, which is not a valid name: rename the handler"
                    ),
                );
                None
            }
        }
    }
}

/// A handler or hook has no generic or lifetime parameters.
///
/// Its client must name concrete, owned types, which travel through the runtime's queue.
pub(crate) fn no_generics(generics: &Generics, helper: Helper, errors: &mut Errors) -> bool {
    let what = helper.what();
    let mut ok = true;
    if !generics.params.is_empty() {
        ok = false;
        let lifetimes_only = generics
            .params
            .iter()
            .all(|param| matches!(param, GenericParam::Lifetime(_)));
        if lifetimes_only {
            errors.spanned(
                generics,
                format!(
                    "{what} cannot have lifetime parameters: its arguments and result are owned values sent through the runtime; remove them"
                ),
            );
        } else {
            errors.spanned(
                generics,
                format!(
                    "{what} cannot be generic: its client needs concrete argument and result types; remove the parameters"
                ),
            );
        }
    }
    signature::no_where_clause(generics, helper, errors) && ok
}

/// Whether `ty` is `Self` (a path of one segment, without arguments).
fn is_self(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none() && path.path.is_ident("Self"))
}

/// A handler borrows the object: `&self` to read the state (a read-only call), `&mut self` to
/// change it. Returns which.
pub(crate) fn handler_receiver(sig: &Signature, errors: &mut Errors) -> Option<Access> {
    let Some(receiver) = sig.receiver() else {
        errors.spanned(
            &sig.ident,
            "a handler takes `&self` (to read the state) or `&mut self` (to change it) as its first argument",
        );
        return None;
    };
    let access = |mutable: bool| {
        if mutable { Access::Write } else { Access::Read }
    };
    match &receiver.kind {
        // `self: &Self` and `self: &mut Self` are the long forms of the shorthands.
        ReceiverKind::Typed(_, ty) => match &**ty {
            Type::Reference(reference)
                if reference.lifetime.is_none() && is_self(&reference.elem) =>
            {
                Some(access(reference.mutability.is_some()))
            }
            _ => {
                errors.spanned(
                    receiver,
                    "a handler borrows the object: write `&self` (to read the state) or `&mut self` (to change it) instead of this receiver",
                );
                None
            }
        },
        ReceiverKind::Reference(_, Some(lifetime), _) => {
            errors.spanned(
                lifetime,
                "remove this lifetime: write `&self` or `&mut self`",
            );
            None
        }
        ReceiverKind::Reference(_, None, mutability) => Some(access(mutability.is_some())),
        _ => {
            errors.spanned(
                receiver,
                "a handler borrows the object, it cannot take it by value: write `&self` (to read the state) or `&mut self` (to change it)",
            );
            None
        }
    }
}

/// Where a `&Context` argument stands.
pub(crate) enum ContextArg {
    /// First after `self`: passed by the runtime, not a client argument.
    First,
    /// Refused (elsewhere, or `&mut`).
    Misplaced,
    /// Not a context.
    No,
}

/// Whether `ty` is `&Context` or `&path::Context`: `Some(true)` for a `&mut` reference.
fn context_reference(ty: &Type) -> Option<bool> {
    signature::reference_to(ty, "Context").map(|reference| reference.mutability.is_some())
}

/// The context, if a handler takes it, comes first after `self`, as `&Context`.
///
/// It is supplied by the runtime, so the client does not take it.
pub(crate) fn context_argument(ty: &Type, position: usize, errors: &mut Errors) -> ContextArg {
    match context_reference(ty) {
        None => ContextArg::No,
        Some(true) => {
            errors.spanned(ty, "take the context by shared reference: `ctx: &Context`");
            ContextArg::Misplaced
        }
        Some(false) if position == 0 => ContextArg::First,
        Some(false) => {
            errors.spanned(
                ty,
                "the context comes first after `self`: move `ctx: &Context` before the other arguments",
            );
            ContextArg::Misplaced
        }
    }
}

/// What a scan of a type found.
#[derive(Default)]
struct TypeScan<'a> {
    impl_traits: Vec<&'a syn::TypeImplTrait>,
    references: Vec<&'a syn::TypeReference>,
    lifetimes: Vec<&'a syn::Lifetime>,
}

impl<'a> Visit<'a> for TypeScan<'a> {
    fn visit_type_impl_trait(&mut self, node: &'a syn::TypeImplTrait) {
        self.impl_traits.push(node);
    }

    fn visit_type_reference(&mut self, node: &'a syn::TypeReference) {
        self.references.push(node);
        // A reference's own lifetime is reported with the reference.
        visit::visit_type(self, &node.elem);
    }

    fn visit_lifetime(&mut self, node: &'a syn::Lifetime) {
        if node.ident != "static" && node.ident != "_" {
            self.lifetimes.push(node);
        }
    }
}

/// Reports `impl Trait`, references and named lifetimes in `ty`.
fn owned_type(ty: &Type, position: &str, errors: &mut Errors) -> TypeVerdict {
    let mut scan = TypeScan::default();
    scan.visit_type(ty);
    let mut verdict = TypeVerdict::Ok;
    for impl_trait in &scan.impl_traits {
        verdict = verdict.max(TypeVerdict::Unmirrorable);
        errors.spanned(
            impl_trait,
            format!(
                "{position} cannot be `impl Trait`: its client must name one concrete type that can be sent; write that type"
            ),
        );
    }
    for reference in &scan.references {
        verdict = verdict.max(if reference.lifetime.is_some() {
            TypeVerdict::Unmirrorable
        } else {
            TypeVerdict::Broken
        });
        errors.spanned(
            reference,
            format!(
                "{position} is sent by value, it cannot borrow: use an owned type (`String` rather than `&str`, `Vec<T>` rather than `&[T]`)"
            ),
        );
    }
    for lifetime in &scan.lifetimes {
        verdict = verdict.max(TypeVerdict::Unmirrorable);
        errors.spanned(
            lifetime,
            format!("{position} is an owned value: remove the lifetime `{lifetime}`"),
        );
    }
    verdict
}

/// A handler argument is an owned, nameable type: no `impl Trait`, no references, no
/// lifetimes. (That it can be sent, `Serialize + DeserializeOwned + Send`, is checked by the
/// compiler, on the type, through the generated `assert_argument`.)
pub(crate) fn argument_type(ty: &Type, errors: &mut Errors) -> TypeVerdict {
    owned_type(ty, "a handler argument", errors)
}

/// A handler returns nothing, an owned value `T`, or `Result<T, E>` (syntactically: a path
/// ending in `Result` with two type arguments, or with one, like `anyhow::Result<T>`, whose
/// error type the compiler then finds), whose `E` reaches the caller as `Error::Handler(E)`.
pub(crate) fn handler_output(output: &ReturnType, errors: &mut Errors) -> (Output, TypeVerdict) {
    let ReturnType::Type(_, ty) = output else {
        return (Output::Unit, TypeVerdict::Ok);
    };
    let verdict = owned_type(ty, "a handler's result", errors);
    let output = match ungroup(ty) {
        Type::Tuple(tuple) if tuple.elems.is_empty() => Output::Unit,
        Type::Path(path) if path.qself.is_none() => match result_arguments(&path.path) {
            Some((ok, Some(err))) => Output::Fallible {
                ok: Box::new(ok.clone()),
                err: ErrorType::Written(Box::new(err.clone())),
            },
            Some((ok, None)) => Output::Fallible {
                ok: Box::new(ok.clone()),
                err: ErrorType::OfAlias(ty.clone()),
            },
            None => Output::Value(ty.clone()),
        },
        _ => Output::Value(ty.clone()),
    };
    (output, verdict)
}

/// `ty` without invisible groups and parentheses.
fn ungroup(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => ungroup(&group.elem),
        Type::Paren(paren) => ungroup(&paren.elem),
        _ => ty,
    }
}

/// `(T, Some(E))` when `path` is `..::Result<T, E>`, `(T, None)` when it is `..::Result<T>`.
fn result_arguments(path: &Path) -> Option<(&Type, Option<&Type>)> {
    let last = path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(arguments) = &last.arguments else {
        return None;
    };
    let mut types = arguments.args.iter().map(|argument| match argument {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    match (types.next(), types.next(), types.next()) {
        (Some(Some(ok)), Some(Some(err)), None) => Some((ok, Some(err))),
        (Some(Some(ok)), None, None) => Some((ok, None)),
        _ => None,
    }
}

/// The after-load hook and alarm handlers borrow the object: `&mut self` (or `&self`).
pub(crate) fn hook_receiver(sig: &Signature, helper: Helper, errors: &mut Errors) -> bool {
    let name = &sig.ident;
    let fix = match helper {
        Helper::Alarm => format!(
            "an `#[alarm]` handler borrows the object: write `fn {name}(&mut self)`, optionally followed by `ctx: &Context`, one argument and `attempt: u32`"
        ),
        Helper::AfterLoad | Helper::Handler => format!(
            "an `#[after_load]` hook borrows the object: write `fn {name}(&mut self)` or `fn {name}(&mut self, ctx: &Context)`"
        ),
    };
    signature::borrowing_receiver(sig, fix, errors)
}

/// The after-load hook takes nothing but, optionally, `ctx: &Context`. Returns whether it
/// takes the context, or `None` after an error.
pub(crate) fn after_load_inputs(sig: &Signature, errors: &mut Errors) -> Option<bool> {
    let mut takes_ctx = false;
    let mut ok = true;
    for (position, input) in signature::typed_inputs(sig).enumerate() {
        if position == 0 && context_reference(&input.ty) == Some(false) {
            takes_ctx = true;
            continue;
        }
        ok = false;
        errors.spanned(
            input,
            "an `#[after_load]` hook takes only `&mut self` and, optionally, `ctx: &Context`: remove this argument",
        );
    }
    ok.then_some(takes_ctx)
}

/// Whether `ty` is `u32`.
fn is_u32(ty: &Type) -> bool {
    matches!(ungroup(ty), Type::Path(path) if path.qself.is_none() && path.path.is_ident("u32"))
}

/// What an alarm handler takes after `self`.
pub(crate) struct AlarmInputs {
    /// Whether it takes `ctx: &Context` (first).
    pub(crate) takes_ctx: bool,
    /// The type of the argument stored with the alarm, if it takes one.
    pub(crate) args: Option<Type>,
    /// Whether it takes the attempt number `attempt: u32` (last).
    pub(crate) takes_attempt: bool,
}

/// An alarm handler takes, after `self`, optionally `ctx: &Context`, then optionally one
/// argument (stored with the alarm), then optionally the attempt number `attempt: u32` (1 on
/// the first try). A lone `u32` is the attempt number: a `u32` argument is taken with the
/// attempt after it. `None` after an error.
pub(crate) fn alarm_inputs(sig: &Signature, errors: &mut Errors) -> Option<AlarmInputs> {
    let inputs: Vec<&syn::PatType> = signature::typed_inputs(sig).collect();
    let takes_ctx = inputs
        .first()
        .is_some_and(|input| context_reference(&input.ty) == Some(false));
    let rest = &inputs[usize::from(takes_ctx)..];
    let (args, takes_attempt, extra) = match rest {
        [] => (None, false, &rest[..0]),
        [only] if is_u32(&only.ty) => (None, true, &rest[..0]),
        [only] => (Some((*only.ty).clone()), false, &rest[..0]),
        [first, second, ..] if is_u32(&second.ty) => (Some((*first.ty).clone()), true, &rest[2..]),
        [first, ..] => (Some((*first.ty).clone()), false, &rest[1..]),
    };
    for input in extra {
        errors.spanned(
            input,
            "an `#[alarm]` handler takes `&mut self`, then optionally `ctx: &Context`, then optionally one argument stored with the alarm (a struct or tuple to carry several values), then optionally `attempt: u32`: remove this argument",
        );
    }
    extra.is_empty().then_some(AlarmInputs {
        takes_ctx,
        args,
        takes_attempt,
    })
}

/// Every alarm has a constant of its own: no two alarm handlers share an upper-case name, and
/// the constant does not clash with another item of the impl block. Returns the alarms whose
/// constant can be generated.
pub(crate) fn alarm_names(
    alarms: Vec<AlarmHandler>,
    item: &ItemImpl,
    object: &Ident,
    errors: &mut Errors,
) -> Vec<AlarmHandler> {
    let items: HashMap<String, &Ident> = block::value_items(item);
    let mut seen: HashMap<String, (Ident, bool)> = HashMap::new();
    let mut kept = Vec::with_capacity(alarms.len());
    for alarm in alarms {
        let constant = alarm.constant.to_string();
        let method = &alarm.method;
        if let Some(other) = items.get(&constant) {
            errors.spanned(
                other,
                format!(
                    "`{constant}` clashes with `{object}::{constant}`, the constant generated for the alarm handler `{method}`: rename one of them"
                ),
            );
            continue;
        }
        let has_cfg = !alarm.cfgs.is_empty();
        if let Some((first, first_cfg)) = seen.get(&constant)
            && !(has_cfg && *first_cfg)
        {
            errors.spanned(
                    method,
                    format!(
                        "the alarm handlers `{first}` and `{method}` would both have the constant `{object}::{constant}`: rename one of them"
                    ),
                );
            continue;
        }
        seen.insert(constant, (method.clone(), has_cfg));
        kept.push(alarm);
    }
    kept
}

/// Every generated client has a name of its own: no two handlers share a client name, no
/// client is `handle` (taken by the generated `<Object>::handle`) or `id` (taken by
/// `<Object>Handle::id`), and no client has the name of another method of the impl block.
/// A method named `handle` is refused for the same reason. Returns the handlers whose client
/// can be generated.
///
/// Client names that would hide a trait method the generated code relies on or users call:
/// an inherent item wins over a trait's in `Counter::default()` or `handle.clone()`.
const TRAIT_METHODS: &[(&str, &str)] = &[
    ("default", "`Default::default`"),
    ("clone", "`Clone::clone`"),
    ("clone_from", "`Clone::clone_from`"),
    ("fmt", "`Debug::fmt`"),
    ("serialize", "`Serialize::serialize`"),
    ("deserialize", "`Deserialize::deserialize`"),
    ("options", "`DurableObject::options`"),
];

/// Two handlers under different `#[cfg(..)]` may share a client name.
pub(crate) fn client_names(
    handlers: Vec<Handler>,
    item: &ItemImpl,
    object: &Ident,
    errors: &mut Errors,
) -> Vec<Handler> {
    let methods = block::value_items(item);
    if let Some(method) = methods.get("handle") {
        errors.spanned(
            method,
            format!(
                "the method `handle` clashes with `{object}::handle`, which `#[durable_object]` generates to build a `{object}Handle`: rename the method"
            ),
        );
    }

    let mut seen: HashMap<String, (Ident, bool)> = HashMap::new();
    let mut kept = Vec::with_capacity(handlers.len());
    for handler in handlers {
        let client = handler.client.unraw().to_string();
        let method = &handler.method;
        if client == "handle" || client == "id" {
            let taken = if client == "handle" {
                format!("`{object}::handle` (which builds a `{object}Handle`)")
            } else {
                format!("`{object}Handle::id`")
            };
            errors.spanned(
                method,
                format!(
                    "the client of `{method}` would be `{client}`, but `#[durable_object]` generates {taken}: rename the handler"
                ),
            );
            continue;
        }
        if let Some((_, hidden)) = TRAIT_METHODS.iter().find(|(name, _)| *name == client) {
            errors.spanned(
                method,
                format!(
                    "the client of `{method}` would be `{client}`, an associated function of `{object}` (or a method of `{object}Handle`) that would hide {hidden}: rename the handler"
                ),
            );
            continue;
        }
        if let Some(plain) = methods.get(&client) {
            errors.spanned(
                plain,
                format!(
                    "the method `{client}` clashes with `{object}::{client}`, the client generated for the handler `{method}`: rename one of them"
                ),
            );
            continue;
        }
        let has_cfg = !handler.cfgs.is_empty();
        if let Some((first, first_cfg)) = seen.get(&client)
            && !(has_cfg && *first_cfg)
        {
            errors.spanned(
                    method,
                    format!(
                        "the handlers `{first}` and `{method}` would both have the client `{object}::{client}`: rename one of them"
                    ),
                );
            continue;
        }
        seen.insert(client, (method.clone(), has_cfg));
        kept.push(handler);
    }
    kept
}
