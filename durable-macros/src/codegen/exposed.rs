//! With `#[durable_object(expose)]`: per handler, a hidden argument struct (`Deserialize`,
//! unknown fields refused) and a function that decodes it and calls the typed client; and the
//! `Exposed` impl holding the table of those handlers and the alarm names. An exposed
//! handler's error type must be `Serialize`: the call that encodes it is spanned at it.
//!
//! With this crate's `schemars` feature, the argument struct also derives `JsonSchema` and
//! each entry gets a function building the handler's JSON schemas (spanned at the output and
//! error types, where a type without a schema is reported); without it, every entry names
//! the runtime's `no_schemas`, so the table has the same shape either way.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use super::client::{HandlerBody, handler_body, reply_codec};
use super::{replace_self, wrap_in_const};
use crate::model::{Access, ErrorType, Handler, HandlerSet, Output};

/// The argument structs, the invoke functions and the `Exposed` impl, in an anonymous
/// constant.
pub(super) fn expand(set: &HandlerSet) -> TokenStream {
    let private = set.root.private();
    let self_ty = &set.self_ty;
    let handlers: Vec<&Handler> = set
        .handlers
        .iter()
        .filter(|handler| !handler.stub && !handler.internal)
        .collect();
    let items = handlers
        .iter()
        .map(|handler| invoke(set, handler, &private));
    let entries = handlers.iter().map(|handler| entry(handler, &private));
    let alarms = set.alarms.iter().map(|alarm| {
        let cfgs = &alarm.cfgs;
        let name = &alarm.name;
        quote!(#(#cfgs)* #name)
    });
    // Only alarms with an argument need a check of their own; the others take none.
    let argument_arms = set.alarms.iter().filter_map(|alarm| {
        let ty = replace_self(alarm.args.as_ref()?, self_ty);
        let cfgs = &alarm.cfgs;
        let name = &alarm.name;
        Some(quote! {
            #(#cfgs)*
            #name => #private::alarm_arguments::<#ty>(__alarm, __args),
        })
    });
    wrap_in_const(quote! {
        #(#items)*

        #[automatically_derived]
        impl #private::Exposed for #self_ty {
            const HANDLERS: &'static [#private::ExposedHandler] = &[#(#entries),*];
            const ALARMS: &'static [&'static ::core::primitive::str] = &[#(#alarms),*];

            fn alarm_arguments(
                __alarm: &'static ::core::primitive::str,
                __args: ::core::option::Option<&#private::JsonValue>,
            ) -> ::core::result::Result<
                ::core::option::Option<::std::vec::Vec<::core::primitive::u8>>,
                #private::CallByNameError,
            > {
                match __alarm {
                    #(#argument_arms)*
                    _ => #private::no_alarm_arguments(__alarm, __args),
                }
            }
        }
    })
}

/// The names generated for one handler: its argument struct, its invoke function, its
/// schemas function and the function saying whether its typed calls can be forwarded.
fn names(handler: &Handler) -> (syn::Ident, syn::Ident, syn::Ident, syn::Ident) {
    let client = handler.client.unraw();
    (
        format_ident!("__Arguments_{}", client),
        format_ident!("__invoke_{}", client),
        format_ident!("__schemas_{}", client),
        format_ident!("__forwards_{}", client),
    )
}

/// One handler's argument struct and invoke function.
fn invoke(set: &HandlerSet, handler: &Handler, private: &TokenStream) -> TokenStream {
    let self_ty = &set.self_ty;
    let serde_crate = set.root.serde_crate();
    let (arguments, function, _, forwards) = names(handler);
    let Handler {
        client,
        args,
        output,
        cfgs,
        ..
    } = handler;
    let name = client.unraw().to_string();
    let idents: Vec<_> = args.iter().map(|argument| &argument.ident).collect();
    let types = args
        .iter()
        .map(|argument| replace_self(&argument.ty, self_ty));
    let access = match handler.access {
        Access::Read => quote!(#private::Access::Read),
        Access::Write => quote!(#private::Access::Write),
    };
    let HandlerBody {
        is_async,
        error,
        closure,
    } = handler_body(handler, &quote!(<#self_ty>));
    let send = if is_async {
        quote!(send)
    } else {
        quote!(send_sync)
    };
    // The fingerprint of a call with an idempotency key is taken from the decoded arguments,
    // as a typed caller takes it from its own: the same call gets the same one either way.
    let call = |idempotency: TokenStream, span: proc_macro2::Span| {
        // The arguments' fingerprint and the reply's encoding bound the error type: spanned
        // there for a fallible handler.
        let fingerprint = quote_spanned!(span=> #idempotency(__options, #name, &(#(&#idents,)*)));
        quote! {
            let __idempotency = #fingerprint;
            let __sent = #private::#send::<#self_ty, _, #error, _>(
                __rt, __id, #access, #name, __options.timeout, __idempotency, #closure,
            )
            .await;
        }
    };
    let reply = match output {
        Output::Fallible { err, .. } => {
            // Spanned at the error type: an error that is not `Serialize` is reported there.
            let span = match err {
                ErrorType::Written(ty) | ErrorType::OfAlias(ty) => ty.span(),
            };
            let at_error = set.root.private_at(span);
            let call = call(
                quote_spanned!(span=> #at_error::json_fallible_idempotency),
                span,
            );
            quote_spanned!(span=> { #call #at_error::json_fallible_reply(#name, __sent) })
        }
        Output::Unit | Output::Value(_) => {
            let call = call(
                quote!(#private::json_idempotency),
                proc_macro2::Span::call_site(),
            );
            quote!({ #call #private::json_reply(#name, __sent) })
        }
    };
    let schemas = schemas(set, handler, private);
    let codec = reply_codec(set, handler, private);
    quote! {
        #(#cfgs)*
        #[derive(#private::serde::Deserialize)]
        #[serde(crate = #serde_crate, deny_unknown_fields)]
        #[allow(non_camel_case_types)]
        struct #arguments {
            #(#idents: #types),*
        }

        // The braces around a fallible handler's call carry the error type's span.
        #(#cfgs)*
        #[allow(unused_braces)]
        fn #function<'__a>(
            __rt: &'__a #private::Runtime,
            __id: &'__a ::core::primitive::str,
            __arguments: #private::JsonValue,
            __options: &'__a #private::CallOptions,
        ) -> #private::BoxFuture<'__a, ::core::result::Result<#private::JsonValue, #private::CallByNameError>> {
            ::std::boxed::Box::pin(async move {
                let #arguments { #(#idents),* } = #private::arguments::<#arguments>(#name, __arguments)?;
                #reply
            })
        }

        #schemas

        #(#cfgs)*
        fn #forwards() -> ::core::primitive::bool {
            ::core::option::Option::is_some(&#codec)
        }
    }
}

/// With the `schemars` feature, the function building one handler's JSON schemas. Each
/// type is asked for its schema through the runtime's `SchemaProbe`, which answers `true` (any
/// value) for a type without one, so the feature never makes a user's code fail to compile.
#[cfg(feature = "schemars")]
fn schemas(set: &HandlerSet, handler: &Handler, private: &TokenStream) -> TokenStream {
    let self_ty = &set.self_ty;
    let (_, _, function, _) = names(handler);
    let name = handler.client.unraw().to_string();
    let cfgs = &handler.cfgs;
    let probe = |ty: TokenStream| quote!((&#private::SchemaProbe::<#ty>::new()));
    let arguments = handler.args.iter().map(|argument| {
        let argument_name = argument.ident.unraw().to_string();
        let ty = replace_self(&argument.ty, self_ty);
        let probe = probe(quote!(#ty));
        quote! {
            let __schema = #probe.argument_schema(__arguments.generator());
            __arguments.argument(#argument_name, __schema, #probe.is_optional());
        }
    });
    let reply = |ty: TokenStream| {
        let probe = probe(ty);
        quote!(#probe.reply_schema())
    };
    let none = quote!(::core::option::Option::None);
    let (output, error) = match &handler.output {
        Output::Unit => (reply(quote!(())), none),
        Output::Value(ty) => {
            let ty = replace_self(ty, self_ty);
            (reply(quote!(#ty)), none)
        }
        Output::Fallible { ok, err } => {
            let ok = replace_self(ok, self_ty);
            let error = reply(super::error_type(err, self_ty, private));
            (
                reply(quote!(#ok)),
                quote!(::core::option::Option::Some(#error)),
            )
        }
    };
    quote! {
        #(#cfgs)*
        fn #function() -> ::core::option::Option<#private::HandlerSchemas> {
            #[allow(unused_imports)]
            use #private::{KnownSchema as _, OptionalArgument as _, RequiredArgument as _, UnknownSchema as _};
            let mut __arguments = #private::ArgumentsSchema::new();
            #(#arguments)*
            #private::handler_schemas(__arguments.finish(#name), #output, #error)
        }
    }
}

/// Without the `schemars` feature, no schemas function: the entry names `no_schemas`.
#[cfg(not(feature = "schemars"))]
fn schemas(_: &HandlerSet, _: &Handler, _: &TokenStream) -> TokenStream {
    TokenStream::new()
}

/// One entry of the handler table.
fn entry(handler: &Handler, private: &TokenStream) -> TokenStream {
    let (_, function, schemas, forwards) = names(handler);
    let schemas = if cfg!(feature = "schemars") {
        quote!(#schemas)
    } else {
        quote!(#private::no_schemas)
    };
    let name = handler.client.unraw().to_string();
    let cfgs = &handler.cfgs;
    let access = match handler.access {
        Access::Read => quote!(#private::Access::Read),
        Access::Write => quote!(#private::Access::Write),
    };
    let argument_names = handler
        .args
        .iter()
        .map(|argument| argument.ident.unraw().to_string());
    quote! {
        #(#cfgs)*
        #private::ExposedHandler {
            name: #name,
            access: #access,
            arguments: &[#(#argument_names),*],
            invoke: #function,
            schemas: #schemas,
            typed_forwarding: #forwards,
        }
    }
}
