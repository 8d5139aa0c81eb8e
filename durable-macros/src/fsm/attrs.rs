//! Darling receivers for `#[durable_fsm(..)]` on the struct ([`FsmArgs`]) and on the impl
//! block ([`FsmImplArgs`]), for `#[step(..)]` ([`StepArgs`]), and the recognition of the
//! helper attributes `#[step]` / `#[on_error]` ([`FsmHelper`]).

use darling::{Error, FromMeta};
use proc_macro2::TokenStream;
use syn::{Attribute, Expr, ExprLit, ExprUnary, Lit, Meta, UnOp};

use crate::args;
use crate::attrs::TypeNameArg;
use crate::errors::Errors;
use crate::flavor::Flavor;
use crate::impl_half::helpers::HelperAttr;

/// The arguments of `#[durable_fsm(..)]` on the state struct.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct FsmArgs {
    /// The stored FSM name; the struct's name when absent.
    pub(crate) name: Option<TypeNameArg>,
    /// `version = 2`.
    pub(crate) version: Option<VersionArg>,
    /// `queue = "payments"`.
    pub(crate) queue: Option<QueueArg>,
    /// `priority = -1`.
    pub(crate) priority: Option<PriorityArg>,
    /// `result = Receipt`.
    #[darling(default)]
    pub(crate) result: ResultArg,
    /// `crate = "path"`: where `durable_runtime` is found, when renamed.
    #[darling(rename = "crate")]
    pub(crate) krate: Option<syn::Path>,
}

/// The names [`FsmArgs`] accepts, so that the impl half can say where they belong.
const STRUCT_OPTIONS: &[&str] = &["name", "version", "queue", "priority", "result"];

impl FsmArgs {
    /// Parses the struct attribute's arguments, recording every error.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        args::parse_struct(args, errors, |krate| Self {
            krate,
            ..Self::default()
        })
    }
}

/// The arguments of `#[durable_fsm(..)]` on the impl block: only `crate = ".."`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct FsmImplArgs {
    /// `crate = "path"`.
    #[darling(rename = "crate")]
    pub(crate) krate: Option<syn::Path>,
}

impl FsmImplArgs {
    /// Parses the impl attribute's arguments, saying where struct options belong.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        args::parse_impl(args, STRUCT_OPTIONS, Flavor::FSM, errors, |krate| Self {
            krate,
        })
    }
}

/// `version = N`: a positive `i32`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct VersionArg(pub(crate) i32);

impl FromMeta for VersionArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => match int.base10_parse::<i32>() {
                Ok(version) if version >= 1 => Ok(Self(version)),
                _ => Err(Error::custom(
                    "the version is a positive integer that fits an `i32`, such as `version = 2`",
                )
                .with_span(int)),
            },
            Expr::Group(group) => Self::from_expr(&group.expr),
            _ => Err(
                Error::custom("expected a positive integer, such as `version = 2`").with_span(expr),
            ),
        }
    }
}

/// `queue = ".."`: a non-empty string.
#[derive(Clone, Debug)]
pub(crate) struct QueueArg(pub(crate) String);

impl FromMeta for QueueArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => {
                let queue = lit.value();
                if queue.trim().is_empty() {
                    Err(Error::custom(
                        "the queue name cannot be empty: remove `queue` to use \"default\"",
                    )
                    .with_span(lit))
                } else {
                    Ok(Self(queue))
                }
            }
            Expr::Group(group) => Self::from_expr(&group.expr),
            _ => Err(Error::custom("expected a string: `queue = \"payments\"`").with_span(expr)),
        }
    }
}

/// `priority = N`: an `i16`, possibly negative (lower runs first).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PriorityArg(pub(crate) i16);

impl FromMeta for PriorityArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        let (negative, int) = match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => (false, int),
            Expr::Unary(ExprUnary {
                op: UnOp::Neg(_),
                expr: inner,
                ..
            }) => match &**inner {
                Expr::Lit(ExprLit {
                    lit: Lit::Int(int), ..
                }) => (true, int),
                _ => return Err(priority_error(expr)),
            },
            Expr::Group(group) => return Self::from_expr(&group.expr),
            _ => return Err(priority_error(expr)),
        };
        let text = if negative {
            format!("-{}", int.base10_digits())
        } else {
            int.base10_digits().to_owned()
        };
        text.parse::<i16>().map(Self).map_err(|_| {
            Error::custom(format!(
                "the priority {text} does not fit an `i16` (from -32768 to 32767)"
            ))
            .with_span(expr)
        })
    }
}

fn priority_error(expr: &Expr) -> Error {
    Error::custom("expected an integer, such as `priority = -1` (lower runs first)").with_span(expr)
}

/// `result = Type`: any type, generic ones included (`result = Vec<String>`), which are not
/// expressions and reach darling as verbatim tokens.
#[derive(Clone, Debug, Default)]
pub(crate) struct ResultArg(pub(crate) Option<syn::Type>);

impl FromMeta for ResultArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Group(group) => Self::from_expr(&group.expr),
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => lit.parse().map(|ty| Self(Some(ty))).map_err(Error::from),
            _ => syn::parse2(quote::ToTokens::to_token_stream(expr))
                .map(|ty| Self(Some(ty)))
                .map_err(|error| Error::from(error).with_span(expr)),
        }
    }

    fn from_invalid_expr(value: &darling::ast::MetaNameValueInvalidExpr) -> darling::Result<Self> {
        syn::parse2(value.value.clone())
            .map(|ty| Self(Some(ty)))
            .map_err(Error::from)
    }

    fn from_word() -> darling::Result<Self> {
        Err(Error::custom(
            "`result` needs a type: write `result = Receipt` (what `Outcome::done` carries)",
        ))
    }
}

/// The options of `#[step(..)]`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct StepArgs {
    /// `initial`: new instances start at this step.
    #[darling(default)]
    pub(crate) initial: bool,
}

impl StepArgs {
    /// Reads the options of one `#[step]` attribute (none when it is bare).
    pub(crate) fn parse(attr: &Attribute, errors: &mut Errors) -> Self {
        match &attr.meta {
            Meta::Path(_) => Self::default(),
            meta => errors.handle(Self::from_meta(meta)).unwrap_or_default(),
        }
    }
}

/// A helper attribute of the impl block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FsmHelper {
    /// `#[step]` or `#[step(initial)]`.
    Step,
    /// `#[on_error]`.
    OnError,
}

impl HelperAttr for FsmHelper {
    fn of(attr: &Attribute) -> Option<Self> {
        let last = attr.path().segments.last()?;
        [FsmHelper::Step, FsmHelper::OnError]
            .into_iter()
            .find(|helper| last.ident == helper.name())
    }

    fn name(self) -> &'static str {
        match self {
            FsmHelper::Step => "step",
            FsmHelper::OnError => "on_error",
        }
    }

    fn what(self) -> &'static str {
        match self {
            FsmHelper::Step => "a step",
            FsmHelper::OnError => "the `#[on_error]` handler",
        }
    }

    const MIXED: &'static str =
        "a method is either a `#[step]` or the `#[on_error]` handler: remove one of the attributes";
}
