//! The rules of `#[durable_fsm]`, one documented function per rule. Each records its errors on
//! the narrowest span, saying what to write instead, and returns what the model needs to carry
//! on.

use std::collections::HashMap;

use syn::{Generics, Ident, ItemImpl, ReturnType, Signature, Type};

use super::attrs::FsmHelper;
use super::model::StepFn;
use crate::errors::Errors;
use crate::impl_half::block;
use crate::impl_half::helpers::HelperAttr;
use crate::impl_half::signature;

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

/// A step or the error handler has no generic or lifetime parameters: the engine calls it by
/// its stored name.
pub(crate) fn no_generics(generics: &Generics, helper: FsmHelper, errors: &mut Errors) -> bool {
    let mut ok = true;
    if !generics.params.is_empty() {
        ok = false;
        errors.spanned(
            generics,
            format!(
                "{} cannot have generic or lifetime parameters: the engine calls it by its stored name; remove them",
                helper.what()
            ),
        );
    }
    signature::no_where_clause(generics, helper, errors) && ok
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
    signature::borrowing_receiver(sig, fix, errors)
}

/// Whether `ty` is `&StepContext` (or `&path::StepContext`): `Some(true)` for `&mut`.
fn context_reference(ty: &Type) -> Option<bool> {
    signature::reference_to(ty, "StepContext")
        .filter(|reference| reference.lifetime.is_none())
        .map(|reference| reference.mutability.is_some())
}

/// A step takes, after `self`, nothing or `ctx: &StepContext`. Returns whether it takes the
/// context, or `None` after an error.
pub(crate) fn step_inputs(sig: &Signature, errors: &mut Errors) -> Option<bool> {
    let mut takes_ctx = false;
    let mut ok = true;
    for (position, input) in signature::typed_inputs(sig).enumerate() {
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
    let missing = format!(
        "a step says what happens next: add `-> Outcome<Self>` (or `-> Result<Outcome<Self>, E>`) to `{}` and return, say, `Outcome::next(Self::OTHER_STEP)` or `Outcome::done(result)`",
        sig.ident
    );
    written_output(sig, missing, errors)
}

/// The return type of `sig`, or `None` after reporting `missing` at its name when it has none.
fn written_output(sig: &Signature, missing: String, errors: &mut Errors) -> Option<Type> {
    match &sig.output {
        ReturnType::Type(_, ty) => Some((**ty).clone()),
        ReturnType::Default => {
            errors.spanned(&sig.ident, missing);
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
    let inputs: Vec<&syn::PatType> = signature::typed_inputs(sig).collect();
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

/// The error handler returns `Outcome<Self>` (any outcome, the specification's `handle/2`).
pub(crate) fn on_error_output(sig: &Signature, errors: &mut Errors) -> Option<Type> {
    let missing = format!(
        "the `#[on_error]` handler decides what happens: add `-> Outcome<Self>` to `{}` (return `Outcome::retry(..)`, `Outcome::stop(error)`, ..)",
        sig.ident
    );
    written_output(sig, missing, errors)
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
    let items = block::value_items(item);
    let mut seen: HashMap<String, Ident> = HashMap::new();
    let mut kept = Vec::with_capacity(steps.len());
    for step in steps {
        let constant = step.constant.to_string();
        let method = &step.method;
        // The first clash found, spanned where the fix goes.
        let clash = if RESERVED.contains(&constant.as_str()) {
            Some((
                method,
                format!(
                    "the step `{method}` would have the constant `{fsm}::{constant}`, which would hide `Fsm::{constant}`: rename the step"
                ),
            ))
        } else if let Some(other) = items.get(&constant) {
            Some((
                *other,
                format!(
                    "`{constant}` clashes with `{fsm}::{constant}`, the constant generated for the step `{method}`: rename one of them"
                ),
            ))
        } else {
            seen.get(&constant).map(|first| {
                (
                    method,
                    format!(
                        "the steps `{first}` and `{method}` would both have the constant `{fsm}::{constant}`: rename one of them"
                    ),
                )
            })
        };
        match clash {
            Some((span, message)) => errors.spanned(span, message),
            None => {
                seen.insert(constant, method.clone());
                kept.push(step);
            }
        }
    }
    kept
}
