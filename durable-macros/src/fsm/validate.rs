//! The rules of `#[durable_fsm]`, one documented function per rule. Each records its errors on
//! the narrowest span, saying what to write instead, and returns what the model needs to carry
//! on.

use std::collections::HashMap;

use syn::ext::IdentExt;
use syn::{
    FnArg, Generics, Ident, ImplItem, ItemImpl, ReceiverKind, ReturnType, Safety, Signature, Type,
};

use super::attrs::FsmHelper;
use super::model::StepFn;
use crate::errors::Errors;

/// Exactly one step is `#[step(initial)]`: new instances start there. Returns it.
pub(crate) fn one_initial(
    initials: &[Ident],
    item: &ItemImpl,
    fsm: &Ident,
    errors: &mut Errors,
) -> Option<Ident> {
    match initials {
        [] => {
            errors.spanned(
                &item.self_ty,
                format!(
                    "`{fsm}` has no initial step: mark the step new instances start at with `#[step(initial)]`"
                ),
            );
            None
        }
        [initial] => Some(initial.clone()),
        [first, rest @ ..] => {
            for other in rest {
                errors.spanned(
                    other,
                    format!(
                        "`{fsm}` has one initial step, and `{first}` is already `#[step(initial)]`: make `{other}` a plain `#[step]`"
                    ),
                );
            }
            Some(first.clone())
        }
    }
}

/// What `helper` is called in messages.
fn what(helper: FsmHelper) -> &'static str {
    match helper {
        FsmHelper::Step => "a step",
        FsmHelper::OnError => "the `#[on_error]` handler",
    }
}

/// A step or the error handler is a plain method: not `const`, `unsafe`, `extern` or variadic.
pub(crate) fn plain_signature(sig: &Signature, helper: FsmHelper, errors: &mut Errors) -> bool {
    let what = what(helper);
    let mut ok = true;
    if let Some(constness) = &sig.constness {
        ok = false;
        errors.spanned(
            constness,
            format!("{what} cannot be `const`: remove `const`"),
        );
    }
    if let Safety::Unsafe(unsafety) = &sig.safety {
        ok = false;
        errors.spanned(
            unsafety,
            format!(
                "{what} cannot be `unsafe`: the engine calls it as a safe method; remove `unsafe`"
            ),
        );
    }
    if let Some(abi) = &sig.abi {
        ok = false;
        errors.spanned(abi, format!("{what} cannot be `extern`: remove the ABI"));
    }
    if let Some(variadic) = &sig.variadic {
        ok = false;
        errors.spanned(variadic, format!("{what} cannot be variadic"));
    }
    ok
}

/// A step or the error handler has no generic or lifetime parameters: the engine calls it by
/// its stored name.
pub(crate) fn no_generics(generics: &Generics, helper: FsmHelper, errors: &mut Errors) -> bool {
    let what = what(helper);
    let mut ok = true;
    if !generics.params.is_empty() {
        ok = false;
        errors.spanned(
            generics,
            format!(
                "{what} cannot have generic or lifetime parameters: the engine calls it by its stored name; remove them"
            ),
        );
    }
    if let Some(clause) = &generics.where_clause {
        ok = false;
        errors.spanned(
            clause,
            format!("{what} cannot have a `where` clause: remove it"),
        );
    }
    ok
}

/// A step or the error handler borrows the state: `&mut self` (or `&self` for one that
/// changes nothing).
pub(crate) fn receiver(sig: &Signature, helper: FsmHelper, errors: &mut Errors) -> bool {
    let name = &sig.ident;
    let fix = match helper {
        FsmHelper::Step => format!(
            "a step borrows the FSM's state: write `fn {name}(&mut self, ctx: &StepContext) -> Outcome<Self>`"
        ),
        FsmHelper::OnError => format!(
            "the `#[on_error]` handler borrows the FSM's state: write `fn {name}(&mut self, error: StepError, ctx: &StepContext) -> Outcome<Self>`"
        ),
    };
    match sig.receiver() {
        Some(receiver) => match &receiver.kind {
            ReceiverKind::Reference(_, None, _) => true,
            ReceiverKind::Reference(_, Some(lifetime), _) => {
                errors.spanned(lifetime, "remove this lifetime: write `&mut self`");
                false
            }
            _ => {
                errors.spanned(receiver, fix);
                false
            }
        },
        None => {
            errors.spanned(name, fix);
            false
        }
    }
}

/// Whether `ty` is `&StepContext` (or `&path::StepContext`): `Some(true)` for `&mut`.
fn context_reference(ty: &Type) -> Option<bool> {
    let Type::Reference(reference) = ty else {
        return None;
    };
    let Type::Path(path) = &*reference.elem else {
        return None;
    };
    let last = path.path.segments.last()?;
    (path.qself.is_none()
        && last.ident == "StepContext"
        && last.arguments.is_none()
        && reference.lifetime.is_none())
    .then_some(reference.mutability.is_some())
}

/// The typed inputs of `sig` (after the receiver).
fn typed_inputs(sig: &Signature) -> impl Iterator<Item = &syn::PatType> {
    sig.inputs.iter().filter_map(|input| match input {
        FnArg::Typed(typed) => Some(typed),
        FnArg::Receiver(_) => None,
    })
}

/// A step takes, after `self`, nothing or `ctx: &StepContext`. Returns whether it takes the
/// context, or `None` after an error.
pub(crate) fn step_inputs(sig: &Signature, errors: &mut Errors) -> Option<bool> {
    let mut takes_ctx = false;
    let mut ok = true;
    for (position, input) in typed_inputs(sig).enumerate() {
        match context_reference(&input.ty) {
            Some(false) if position == 0 => takes_ctx = true,
            Some(true) => {
                ok = false;
                errors.spanned(
                    &input.ty,
                    "take the step context by shared reference: `ctx: &StepContext`",
                );
            }
            _ => {
                ok = false;
                errors.spanned(
                    input,
                    "a step takes only `&mut self` and, optionally, `ctx: &StepContext`: remove this argument (the state is `self`; signals and children are in the context)",
                );
            }
        }
    }
    ok.then_some(takes_ctx)
}

/// A step returns `Outcome<Self>` or `Result<Outcome<Self>, E>` (checked by the compiler on
/// the return type; here only its presence). Returns the type.
pub(crate) fn step_output(sig: &Signature, errors: &mut Errors) -> Option<Type> {
    match &sig.output {
        ReturnType::Type(_, ty) => Some((**ty).clone()),
        ReturnType::Default => {
            errors.spanned(
                &sig.ident,
                format!(
                    "a step says what happens next: add `-> Outcome<Self>` (or `-> Result<Outcome<Self>, E>`) to `{}` and return, say, `Outcome::next(Self::OTHER_STEP)` or `Outcome::done(result)`",
                    sig.ident
                ),
            );
            None
        }
    }
}

/// Whether `ty` is `StepError` (or `path::StepError`), by value.
fn is_step_error(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none()
        && path.path.segments.last().is_some_and(|last| last.ident == "StepError" && last.arguments.is_none()))
}

/// The error handler takes, after `self`, `error: StepError` and optionally
/// `ctx: &StepContext`. Returns whether it takes the context, or `None` after an error.
pub(crate) fn on_error_inputs(sig: &Signature, errors: &mut Errors) -> Option<bool> {
    let inputs: Vec<&syn::PatType> = typed_inputs(sig).collect();
    let mut ok = true;
    let mut takes_ctx = false;
    match inputs.first() {
        Some(first) if is_step_error(&first.ty) => {}
        Some(first) => {
            ok = false;
            errors.spanned(
                first,
                "the `#[on_error]` handler takes the error first after `self`: `error: StepError`",
            );
        }
        None => {
            ok = false;
            errors.spanned(
                &sig.ident,
                format!(
                    "the `#[on_error]` handler receives the error: write `fn {}(&mut self, error: StepError, ctx: &StepContext) -> Outcome<Self>`",
                    sig.ident
                ),
            );
        }
    }
    for input in inputs.iter().skip(1) {
        if !takes_ctx && context_reference(&input.ty) == Some(false) {
            takes_ctx = true;
        } else {
            ok = false;
            errors.spanned(
                input,
                "the `#[on_error]` handler takes `&mut self`, `error: StepError` and, optionally, `ctx: &StepContext`: remove this argument",
            );
        }
    }
    ok.then_some(takes_ctx)
}

/// The error handler returns `Outcome<Self>` (any outcome, the seed's `handle/2`).
pub(crate) fn on_error_output(sig: &Signature, errors: &mut Errors) -> Option<Type> {
    match &sig.output {
        ReturnType::Type(_, ty) => Some((**ty).clone()),
        ReturnType::Default => {
            errors.spanned(
                &sig.ident,
                format!(
                    "the `#[on_error]` handler decides what happens: add `-> Outcome<Self>` to `{}` (return `Outcome::retry(..)`, `Outcome::stop(error)`, ..)",
                    sig.ident
                ),
            );
            None
        }
    }
}

/// Names the generated constants must not take: they would hide the `Fsm` trait's.
const RESERVED: &[&str] = &["INITIAL", "STEPS"];

/// Every step has a constant of its own: no two steps share an upper-case name, no constant
/// clashes with another item of the impl block or hides a trait constant. Returns the steps
/// whose constant can be generated.
pub(crate) fn step_names(
    steps: Vec<StepFn>,
    item: &ItemImpl,
    fsm: &Ident,
    errors: &mut Errors,
) -> Vec<StepFn> {
    let mut items: HashMap<String, &Ident> = HashMap::new();
    for impl_item in &item.items {
        let ident = match impl_item {
            ImplItem::Fn(method) => &method.sig.ident,
            ImplItem::Const(constant) => &constant.ident,
            _ => continue,
        };
        items.entry(ident.unraw().to_string()).or_insert(ident);
    }
    let mut seen: HashMap<String, Ident> = HashMap::new();
    let mut kept = Vec::with_capacity(steps.len());
    for step in steps {
        let constant = step.constant.to_string();
        let method = &step.method;
        if RESERVED.contains(&constant.as_str()) {
            errors.spanned(
                method,
                format!(
                    "the step `{method}` would have the constant `{fsm}::{constant}`, which would hide `Fsm::{constant}`: rename the step"
                ),
            );
            continue;
        }
        if let Some(other) = items.get(&constant) {
            errors.spanned(
                other,
                format!(
                    "`{constant}` clashes with `{fsm}::{constant}`, the constant generated for the step `{method}`: rename one of them"
                ),
            );
            continue;
        }
        if let Some(first) = seen.get(&constant) {
            errors.spanned(
                method,
                format!(
                    "the steps `{first}` and `{method}` would both have the constant `{fsm}::{constant}`: rename one of them"
                ),
            );
            continue;
        }
        seen.insert(constant, method.clone());
        kept.push(step);
    }
    kept
}
