//! Darling receivers for everything the user writes inside attributes: the options of
//! `#[durable_object(..)]` on the struct ([`ObjectArgs`]) and on the impl block ([`ImplArgs`]),
//! `#[field(..)]` on state fields ([`FieldAttrs`]), and the recognition of the helper
//! attributes `#[handler]` / `#[after_load]` ([`Helper`]).

use darling::{Error, FromField, FromMeta};
use proc_macro2::TokenStream;
use syn::{Attribute, Expr, ExprLit, Lit, Meta};

use crate::args;
use crate::duration;
use crate::errors::Errors;
use crate::flavor::Flavor;
use crate::impl_half::helpers::HelperAttr;

/// The arguments of `#[durable_object(..)]` on the state struct.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct ObjectArgs {
    /// The stored type name; the struct's name when absent.
    pub(crate) name: Option<TypeNameArg>,
    /// `hibernate_after = "5m"`.
    pub(crate) hibernate_after: Option<DurationArg>,
    /// `shutdown_after = "1h"`.
    pub(crate) shutdown_after: Option<DurationArg>,
    /// `call_timeout = "30s"`.
    pub(crate) call_timeout: Option<DurationArg>,
    /// `queue_capacity = 64`.
    pub(crate) queue_capacity: Option<CapacityArg>,
    /// `kv_max_keys = 10000`.
    pub(crate) kv_max_keys: Option<LimitArg>,
    /// `kv_max_value_bytes = 1048576`.
    pub(crate) kv_max_value_bytes: Option<LimitArg>,
    /// `kv_max_bytes = 52428800`.
    pub(crate) kv_max_bytes: Option<LimitArg>,
    /// `kv_cache_bytes = 1048576`.
    pub(crate) kv_cache_bytes: Option<LimitArg>,
    /// `crate = "path"`: where `durable_runtime` is found, when renamed.
    #[darling(rename = "crate")]
    pub(crate) krate: Option<syn::Path>,
}

/// The names [`ObjectArgs`] accepts, so that the impl half can say where they belong.
const OBJECT_OPTIONS: &[&str] = &[
    "name",
    "hibernate_after",
    "shutdown_after",
    "call_timeout",
    "queue_capacity",
    "kv_max_keys",
    "kv_max_value_bytes",
    "kv_max_bytes",
    "kv_cache_bytes",
];

impl ObjectArgs {
    /// Parses the struct attribute's arguments. Every error goes to `errors`; the result holds
    /// what parsed (at least `crate = ..` when it is valid, so that generated code still
    /// resolves and errors do not cascade).
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        args::parse_struct(args, errors, |krate| Self {
            krate,
            ..Self::default()
        })
    }
}

/// The arguments of `#[durable_object(..)]` on the impl block: `expose` and `crate = ".."`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct ImplArgs {
    /// `expose`: the handlers are callable by name, through a generated handler table.
    #[darling(default)]
    pub(crate) expose: bool,
    /// `crate = "path"`: where `durable_runtime` is found, when renamed.
    #[darling(rename = "crate")]
    pub(crate) krate: Option<syn::Path>,
}

impl ImplArgs {
    /// Parses the impl attribute's arguments, saying where struct options belong when they
    /// are given here.
    pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> Self {
        args::parse_impl(args, OBJECT_OPTIONS, Flavor::OBJECT, errors, |krate| Self {
            krate,
            expose: false,
        })
    }
}

/// A duration option: a string literal parsed by `humantime` at compile time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DurationArg {
    /// Whole nanoseconds, never zero.
    pub(crate) nanos: u64,
}

impl FromMeta for DurationArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => duration::parse(lit).map(|nanos| Self { nanos }),
            Expr::Group(group) => Self::from_expr(&group.expr),
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => Err(Error::custom(format!(
                "durations are strings with a unit: write \"{}s\" (or \"ms\", \"m\", \"h\")",
                int.base10_digits()
            ))
            .with_span(expr)),
            _ => Err(Error::custom(
                "expected a duration string such as \"250ms\", \"30s\", \"5m\" or \"1h30m\"",
            )
            .with_span(expr)),
        }
    }

    fn from_word() -> darling::Result<Self> {
        Err(Error::custom(
            "this option needs a duration: write it as `= \"5m\"`",
        ))
    }
}

/// `queue_capacity`: a positive integer literal.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CapacityArg {
    /// At least 1.
    pub(crate) value: usize,
}

impl FromMeta for CapacityArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => match int.base10_parse::<usize>() {
                Ok(0) => Err(Error::custom(
                    "`queue_capacity` must be at least 1: a queue of 0 refuses every call",
                )
                .with_span(int)),
                Ok(value) => Ok(Self { value }),
                Err(error) => Err(Error::from(error)),
            },
            Expr::Group(group) => Self::from_expr(&group.expr),
            _ => Err(
                Error::custom("expected a positive integer, such as `queue_capacity = 64`")
                    .with_span(expr),
            ),
        }
    }

    fn from_word() -> darling::Result<Self> {
        Err(Error::custom(
            "`queue_capacity` needs a value: write `queue_capacity = 64`",
        ))
    }
}

/// A key-value limit: a non-negative integer literal.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LimitArg {
    pub(crate) value: u64,
}

impl FromMeta for LimitArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => int
                .base10_parse::<u64>()
                .map(|value| Self { value })
                .map_err(Error::from),
            Expr::Group(group) => Self::from_expr(&group.expr),
            _ => Err(
                Error::custom("expected an integer, such as `kv_max_keys = 10000`").with_span(expr),
            ),
        }
    }

    fn from_word() -> darling::Result<Self> {
        Err(Error::custom(
            "this limit needs a value: write it as `= 10000`",
        ))
    }
}

/// `name = ".."`: the stored type name, a non-empty string.
#[derive(Clone, Debug)]
pub(crate) struct TypeNameArg(pub(crate) String);

impl FromMeta for TypeNameArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) => {
                let name = lit.value();
                if name.trim().is_empty() {
                    Err(Error::custom(
                        "the stored type name cannot be empty: remove `name` to use the struct's name",
                    )
                    .with_span(lit))
                } else {
                    Ok(Self(name))
                }
            }
            Expr::Group(group) => Self::from_expr(&group.expr),
            _ => Err(Error::custom("expected a string: `name = \"Counter\"`").with_span(expr)),
        }
    }
}

/// The attributes of one state field: `#[field(default = <expr>)]`.
#[derive(Debug, FromField)]
#[darling(attributes(field))]
pub(crate) struct FieldAttrs {
    /// The field's default, an expression of the field's type.
    pub(crate) default: Option<DefaultExpr>,
}

/// A `default = <expr>` value, taken verbatim: `default = "x"` is the string literal `"x"`,
/// not an expression parsed from a string as darling does for `syn::Expr`.
#[derive(Debug)]
pub(crate) struct DefaultExpr(pub(crate) Expr);

impl FromMeta for DefaultExpr {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        Ok(Self(expr.clone()))
    }

    fn from_word() -> darling::Result<Self> {
        Err(Error::custom(
            "`default` needs a value: write `#[field(default = <expr>)]`; without it the field takes `Default::default()`",
        ))
    }
}

/// The name of the field attribute, stripped from the re-emitted struct.
pub(crate) const FIELD: &str = "field";

/// The options of `#[handler(..)]`.
#[derive(Debug, Default, FromMeta)]
pub(crate) struct HandlerArgs {
    /// `internal`: the handler is left out of the table of handlers callable by name.
    #[darling(default)]
    pub(crate) internal: bool,
}

impl HandlerArgs {
    /// Reads the options of one `#[handler]` attribute (none when it is bare).
    pub(crate) fn parse(attr: &Attribute, errors: &mut Errors) -> Self {
        match &attr.meta {
            Meta::Path(_) => Self::default(),
            meta => errors.handle(Self::from_meta(meta)).unwrap_or_default(),
        }
    }
}

/// A helper attribute of the impl block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Helper {
    /// `#[handler]`.
    Handler,
    /// `#[after_load]`.
    AfterLoad,
    /// `#[alarm]`.
    Alarm,
}

impl HelperAttr for Helper {
    fn of(attr: &Attribute) -> Option<Self> {
        let last = attr.path().segments.last()?;
        [Helper::Handler, Helper::AfterLoad, Helper::Alarm]
            .into_iter()
            .find(|helper| last.ident == helper.name())
    }

    fn name(self) -> &'static str {
        match self {
            Helper::Handler => "handler",
            Helper::AfterLoad => "after_load",
            Helper::Alarm => "alarm",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Helper::Handler => "a handler",
            Helper::AfterLoad => "an `#[after_load]` hook",
            Helper::Alarm => "an `#[alarm]` handler",
        }
    }

    const MIXED: &'static str = "a method is one of a `#[handler]`, an `#[alarm]` handler or the `#[after_load]` hook: remove all but one attribute";
}

impl Helper {
    /// Checks that the helper was written bare (`#[alarm]`, not `#[alarm(..)]`); `#[handler]`
    /// takes its options, read by [`HandlerArgs`].
    pub(crate) fn check_bare(attr: &Attribute, errors: &mut Errors) {
        if let Some(helper) = Self::of(attr)
            && helper != Helper::Handler
            && !matches!(attr.meta, Meta::Path(_))
        {
            errors.spanned(
                &attr.meta,
                format!(
                    "`#[{}]` takes no arguments: write `#[{}]`",
                    helper.name(),
                    helper.name()
                ),
            );
        }
    }
}
