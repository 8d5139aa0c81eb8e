//! The IR of `#[durable_fsm]`: the state struct as an [`FsmStruct`] (around the
//! [`StateStruct`] both macros share) and the impl
//! block as a [`StepSet`] of [`StepFn`]s with an optional [`ErrorFn`]. Built by the
//! `from_ast` constructors, which run the rules of [`super::validate`] and accumulate their
//! errors.

use syn::ext::IdentExt;
use syn::{Attribute, Ident, ImplItemFn, ItemImpl, ItemStruct, Type};

use super::attrs::{FsmArgs, FsmHelper, FsmImplArgs, StepArgs};
use super::validate;
use crate::errors::Errors;
use crate::flavor::Flavor;
use crate::impl_half::{block, helpers, signature};
use crate::paths::Root;
use crate::state_half::model::StateStruct;

/// The state half.
pub(crate) struct FsmStruct {
    /// Where the runtime is found.
    pub(crate) root: Root,
    /// The struct; its stored name is `FsmState::NAME`.
    pub(crate) state: StateStruct,
    /// `FsmState::VERSION`.
    pub(crate) version: i32,
    /// `FsmState::QUEUE`.
    pub(crate) queue: String,
    /// `FsmState::PRIORITY`.
    pub(crate) priority: i16,
    /// `FsmState::Result`; `()` when absent.
    pub(crate) result: Option<Type>,
}

impl FsmStruct {
    /// Builds the state half. `None` when the struct cannot be an FSM state at all (tuple
    /// struct, generics); the errors say why.
    pub(crate) fn from_ast(item: &ItemStruct, args: FsmArgs, errors: &mut Errors) -> Option<Self> {
        Self::from_ast_as(item, args, Flavor::FSM, errors)
    }

    /// Builds the state half for the macro `flavor` (whose words its errors use).
    pub(crate) fn from_ast_as(
        item: &ItemStruct,
        args: FsmArgs,
        flavor: Flavor,
        errors: &mut Errors,
    ) -> Option<Self> {
        let state = StateStruct::from_ast(item, args.name, flavor, errors)?;
        Some(Self {
            root: Root::new(args.krate),
            state,
            version: args.version.map_or(1, |version| version.0),
            queue: args
                .queue
                .map_or_else(|| "default".to_owned(), |queue| queue.0),
            priority: args.priority.map_or(0, |priority| priority.0),
            result: args.result.0,
        })
    }
}

/// The behaviour half: the impl block, its steps and its error handler.
pub(crate) struct StepSet {
    /// Where the runtime is found.
    pub(crate) root: Root,
    /// The user's impl block with the helper attributes removed.
    pub(crate) item: ItemImpl,
    /// The FSM type as the impl block names it.
    pub(crate) self_ty: Type,
    /// The FSM's name (the last segment of `self_ty`).
    pub(crate) object: Ident,
    /// The steps, in source order.
    pub(crate) steps: Vec<StepFn>,
    /// The initial step's method, when exactly one step is marked initial.
    pub(crate) initial: Option<Ident>,
    /// The `#[on_error]` method.
    pub(crate) on_error: Option<ErrorFn>,
}

/// One `#[step]` method.
pub(crate) struct StepFn {
    /// The method.
    pub(crate) method: Ident,
    /// The stored step name: the method's name.
    pub(crate) name: String,
    /// The `Step<Self>` constant, the name in upper case.
    pub(crate) constant: Ident,
    /// Whether it is `async`.
    pub(crate) is_async: bool,
    /// Whether it takes `&StepContext`.
    pub(crate) takes_ctx: bool,
    /// Its return type.
    pub(crate) output: Type,
    /// Its doc comments, repeated on the constant.
    pub(crate) docs: Vec<Attribute>,
    /// The signature broke a rule: emit its constant (so that uses of it still resolve and the
    /// one error is the rule's) but no dispatch to it.
    pub(crate) stub: bool,
}

/// The `#[on_error]` method.
pub(crate) struct ErrorFn {
    /// The method.
    pub(crate) method: Ident,
    /// Whether it is `async`.
    pub(crate) is_async: bool,
    /// Whether it takes `&StepContext` after the error.
    pub(crate) takes_ctx: bool,
    /// Its return type.
    pub(crate) output: Type,
}

impl StepSet {
    /// Builds the behaviour half. `Err` holds the impl block with helper attributes stripped
    /// when it cannot be an FSM impl at all; the errors say why.
    pub(crate) fn from_ast(
        mut item: ItemImpl,
        args: FsmImplArgs,
        errors: &mut Errors,
    ) -> Result<Self, Box<ItemImpl>> {
        let marked = helpers::strip_helpers::<FsmHelper>(&mut item);
        let Some(object) = block::impl_shape(&item, Flavor::FSM, errors) else {
            return Err(Box::new(item));
        };
        let mut steps = Vec::new();
        let mut initials: Vec<Ident> = Vec::new();
        let mut on_error: Option<ErrorFn> = None;
        let mut first_on_error: Option<Ident> = None;
        for marked in &marked {
            let Some(method) = helpers::marked_method(&item, marked, errors) else {
                continue;
            };
            let Some((helper, attr)) = helpers::one_helper(&marked.helpers, errors) else {
                continue;
            };
            match helper {
                FsmHelper::Step => {
                    let options = StepArgs::parse(attr, errors);
                    if options.initial {
                        initials.push(method.sig.ident.clone());
                    }
                    if let Some(step) = StepFn::from_fn(method, errors) {
                        steps.push(step);
                    }
                }
                FsmHelper::OnError => {
                    if !matches!(attr.meta, syn::Meta::Path(_)) {
                        errors.spanned(
                            &attr.meta,
                            "`#[on_error]` takes no arguments: write `#[on_error]`",
                        );
                    }
                    let handler = ErrorFn::from_fn(method, errors);
                    if let Some(first) = &first_on_error {
                        errors.spanned(
                            &method.sig.ident,
                            format!(
                                "an FSM has at most one `#[on_error]` handler, and `{first}` is already one: merge `{}` into it",
                                method.sig.ident
                            ),
                        );
                    } else {
                        first_on_error = Some(method.sig.ident.clone());
                        on_error = handler;
                    }
                }
            }
        }
        let initial = validate::one_initial(&initials, &item, &object, errors);
        let steps = validate::step_names(steps, &item, &object, errors);
        let self_ty = (*item.self_ty).clone();
        Ok(Self {
            root: Root::new(args.krate),
            item,
            self_ty,
            object,
            steps,
            initial,
            on_error,
        })
    }
}

impl StepFn {
    /// Reads one `#[step]` method; a signature that breaks a rule gives a stub (the errors say
    /// how).
    fn from_fn(method: &ImplItemFn, errors: &mut Errors) -> Option<Self> {
        let sig = &method.sig;
        let plain = signature::plain_signature(sig, FsmHelper::Step, Flavor::FSM, errors);
        let generics = validate::no_generics(&sig.generics, FsmHelper::Step, errors);
        let receiver = validate::receiver(sig, FsmHelper::Step, errors);
        let takes_ctx = validate::step_inputs(sig, errors);
        let output = validate::step_output(sig, errors);
        let stub = !(plain && generics && receiver) || takes_ctx.is_none() || output.is_none();
        let name = sig.ident.unraw().to_string();
        Some(Self {
            method: sig.ident.clone(),
            constant: Ident::new(&name.to_uppercase(), sig.ident.span()),
            name,
            is_async: sig.asyncness.is_some(),
            takes_ctx: takes_ctx.unwrap_or(false),
            output: output.unwrap_or_else(|| syn::parse_quote!(())),
            stub,
            docs: method
                .attrs
                .iter()
                .filter(|attr| attr.path().is_ident("doc"))
                .cloned()
                .collect(),
        })
    }
}

impl ErrorFn {
    /// Reads the `#[on_error]` method. `None` when its signature is wrong.
    fn from_fn(method: &ImplItemFn, errors: &mut Errors) -> Option<Self> {
        let sig = &method.sig;
        let plain = signature::plain_signature(sig, FsmHelper::OnError, Flavor::FSM, errors);
        let generics = validate::no_generics(&sig.generics, FsmHelper::OnError, errors);
        let receiver = validate::receiver(sig, FsmHelper::OnError, errors);
        let takes_ctx = validate::on_error_inputs(sig, errors);
        let output = validate::on_error_output(sig, errors);
        if !(plain && generics && receiver) {
            return None;
        }
        Some(Self {
            method: sig.ident.clone(),
            is_async: sig.asyncness.is_some(),
            takes_ctx: takes_ctx?,
            output: output?,
        })
    }
}
