//! `#[job]`: a one-step FSM. The struct (the job's arguments) gets everything the state half
//! of `#[durable_fsm]` gives, plus `JobSettings` from the retry options and an `Fsm` impl with
//! the single step `perform`, which calls the user's `impl Job`. Options are parsed into
//! [`JobArgs`], checked into a [`JobModel`] (every error spanned and collected), then
//! generated.

use darling::FromMeta;
use darling::util::SpannedValue;
use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::{Item, ItemImpl, ItemStruct};

use super::attrs::{FsmArgs, PriorityArg, QueueArg, VersionArg};
use super::codegen;
use super::model::FsmStruct;
use crate::args;
use crate::attrs::{DurationArg, TypeNameArg};
use crate::codegen::wrap_in_const;
use crate::entry::{self, Halves};
use crate::errors::Errors;
use crate::flavor::Flavor;

/// Defaults of the retry options, in nanoseconds for the durations.
const DEFAULT_ATTEMPTS: u32 = 3;
const DEFAULT_BACKOFF: u64 = 1_000_000_000;
const DEFAULT_MAX_BACKOFF: u64 = 300_000_000_000;

/// The arguments of `#[job(..)]`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct JobArgs {
    /// The stored FSM name; the struct's name when absent.
    name: Option<TypeNameArg>,
    /// `version = 2`.
    version: Option<VersionArg>,
    /// `queue = "mail"`.
    queue: Option<QueueArg>,
    /// `priority = -1`.
    priority: Option<PriorityArg>,
    /// `max_attempts = 5`.
    max_attempts: Option<SpannedValue<AttemptsArg>>,
    /// `backoff = "1s"`.
    backoff: Option<SpannedValue<DurationArg>>,
    /// `max_backoff = "5m"`.
    max_backoff: Option<SpannedValue<DurationArg>>,
    /// `crate = "path"`.
    #[darling(rename = "crate")]
    krate: Option<syn::Path>,
}

/// `max_attempts = N`: a whole number that fits a `u32` (zero is refused by the model, with
/// its own message).
#[derive(Clone, Copy, Debug)]
struct AttemptsArg(u32);

impl FromMeta for AttemptsArg {
    fn from_expr(expr: &syn::Expr) -> darling::Result<Self> {
        match expr {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(int),
                ..
            }) => int.base10_parse::<u32>().map(Self).map_err(|_| {
                darling::Error::custom(format!(
                    "{} attempts do not fit a `u32`",
                    int.base10_digits()
                ))
                .with_span(int)
            }),
            syn::Expr::Group(group) => Self::from_expr(&group.expr),
            _ => Err(darling::Error::custom(
                "expected a whole number of attempts, at least 1, such as `max_attempts = 5`",
            )
            .with_span(expr)),
        }
    }
}

/// A checked job: its FSM half and its retry policy.
struct JobModel {
    fsm: FsmStruct,
    max_attempts: u32,
    backoff: u64,
    max_backoff: u64,
}

/// `#[job]` on any item.
pub(crate) fn job(args: TokenStream, input: TokenStream) -> TokenStream {
    let halves = Halves {
        on_struct,
        on_impl,
        misplaced,
    };
    entry::expand(Flavor::JOB, halves, args, input)
}

fn on_struct(args: TokenStream, item: &ItemStruct) -> TokenStream {
    let mut errors = Errors::new();
    let args: JobArgs = args::parse_struct(args, &mut errors, |krate| JobArgs {
        krate,
        ..JobArgs::default()
    });
    let body = match JobModel::from_ast(item, args, &mut errors) {
        Some(model) => generate(&model),
        None => crate::state_half::model::strip_field_attrs(item).into_token_stream(),
    };
    let errors = errors.finish();
    quote!(#errors #body)
}

impl JobModel {
    /// Checks the options: at least one attempt, a cap no shorter than the first delay.
    fn from_ast(item: &ItemStruct, args: JobArgs, errors: &mut Errors) -> Option<Self> {
        let max_attempts = match args.max_attempts {
            Some(attempts) if attempts.0 == 0 => {
                errors.push(syn::Error::new(
                    attempts.span(),
                    "a job needs at least one attempt: `max_attempts = 1` runs `perform` once and never retries",
                ));
                1
            }
            Some(attempts) => attempts.0,
            None => DEFAULT_ATTEMPTS,
        };
        let backoff = args.backoff.as_ref().map_or(DEFAULT_BACKOFF, |b| b.nanos);
        let max_backoff = match &args.max_backoff {
            Some(max) if max.nanos < backoff => {
                errors.push(syn::Error::new(
                    max.span(),
                    "`max_backoff` caps the retry delay and cannot be shorter than `backoff` (the first delay)",
                ));
                backoff
            }
            Some(max) => max.nanos,
            None => DEFAULT_MAX_BACKOFF.max(backoff),
        };
        let fsm_args = FsmArgs {
            name: args.name,
            version: args.version,
            queue: args.queue,
            priority: args.priority,
            krate: args.krate,
            ..FsmArgs::default()
        };
        let fsm = FsmStruct::from_ast_as(item, fsm_args, Flavor::JOB, errors)?;
        Some(Self {
            fsm,
            max_attempts,
            backoff,
            max_backoff,
        })
    }
}

/// The state half of `#[durable_fsm]`, then `JobSettings` and the one-step `Fsm` impl.
fn generate(model: &JobModel) -> TokenStream {
    let JobModel {
        fsm,
        max_attempts,
        backoff,
        max_backoff,
    } = model;
    let state = codegen::state(fsm);
    let private = fsm.root.private();
    let ident = &fsm.state.ident;
    let duration = |nanos: u64| {
        let secs = nanos / 1_000_000_000;
        let sub = (nanos % 1_000_000_000) as u32;
        quote!(::core::time::Duration::new(#secs, #sub))
    };
    let (backoff, max_backoff) = (duration(*backoff), duration(*max_backoff));
    // Spanned at the struct, so that a missing `impl Job` is reported there.
    let private_at = fsm.root.private_at(ident.span());
    let check = quote_spanned! {ident.span()=>
        #private_at::fsm::assert_job::<#ident>();
    };
    let impls = wrap_in_const(quote! {
        #[automatically_derived]
        impl #private::fsm::JobSettings for #ident {
            const MAX_ATTEMPTS: ::core::primitive::u32 = #max_attempts;
            const BACKOFF: ::core::time::Duration = #backoff;
            const MAX_BACKOFF: ::core::time::Duration = #max_backoff;
        }

        #[automatically_derived]
        impl #private::fsm::Fsm for #ident {
            const INITIAL: #private::fsm::Step<Self> = #private::fsm::step::<Self>("perform");
            const STEPS: &'static [&'static ::core::primitive::str] = &["perform"];

            fn run_step<'__a>(
                &'__a mut self,
                __step: &::core::primitive::str,
                __ctx: &'__a #private::fsm::StepContext,
            ) -> ::core::option::Option<
                #private::fsm::BoxFuture<
                    '__a,
                    ::core::result::Result<#private::fsm::Outcome<Self>, #private::fsm::BoxError>,
                >,
            > {
                match __step {
                    "perform" => ::core::option::Option::Some(
                        #private::fsm::job_perform::<Self>(self, __ctx),
                    ),
                    _ => ::core::option::Option::None,
                }
            }

            fn on_error<'__a>(
                &'__a mut self,
                __error: #private::fsm::StepError,
                __ctx: &'__a #private::fsm::StepContext,
            ) -> #private::fsm::BoxFuture<'__a, #private::fsm::Outcome<Self>> {
                #private::fsm::job_on_error::<Self>(__error, __ctx)
            }
        }

        #check
    });
    quote!(#state #impls)
}

/// `#[job]` on an impl block: the work goes in `impl Job`, without the attribute.
fn on_impl(_args: TokenStream, item: ItemImpl) -> TokenStream {
    let span = item.impl_token.span;
    let error = syn::Error::new(
        span,
        "`#[job]` goes on the job's struct only: implement `durable_runtime::fsm::Job` for it without an attribute (`impl Job for SendEmail { type Error = ..; async fn perform(&self, ctx: &StepContext) -> Result<(), Self::Error> { .. } }`)",
    )
    .into_compile_error();
    quote!(#error #item)
}

/// `#[job]` on anything else.
fn misplaced(item: &Item) -> TokenStream {
    let span: Span = entry::first_span(item);
    let error = syn::Error::new(
        span,
        "`#[job]` goes on a struct with named fields: the job's arguments",
    )
    .into_compile_error();
    quote!(#error #item)
}
