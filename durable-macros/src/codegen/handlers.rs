//! The impl half's hidden items: the `Handlers` impl (with the after-load hook, if any), the
//! check that the struct half exists, and the spanned checks of every handler's types.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use super::{replace_self, wrap_in_const};
use crate::model::{AfterLoad, AlarmHandler, ErrorType, Handler, HandlerSet, Output};

/// The `Handlers` impl and the type checks, in an anonymous constant.
pub(super) fn expand(set: &HandlerSet) -> TokenStream {
    let private = set.root.private();
    let self_ty = &set.self_ty;
    let after_load = set
        .after_load
        .as_ref()
        .map(|hook| after_load(set, hook, &private));
    let alarm = (!set.alarms.is_empty()).then(|| alarm(set, &private));
    let signatures = super::describe::handlers(set, &private);
    // Without the struct half, this is the error the user sees ("`Counter` is not a durable
    // object", with the fix). Clients check the same bound (at the same span, so rustc shows
    // that error once); with no client, this assertion checks it.
    let has_clients = set.handlers.iter().any(|handler| !handler.stub);
    let object_check = (!has_clients).then(|| {
        quote_spanned! {self_ty.span()=>
            #private::assert_durable_object::<#self_ty>();
        }
    });
    let checks = set
        .handlers
        .iter()
        .filter(|handler| !handler.stub)
        .map(|handler| type_checks(set, handler, &private));
    let alarm_checks = set.alarms.iter().filter_map(|alarm| {
        let ty = alarm.args.as_ref()?;
        let cfgs = &alarm.cfgs;
        let replaced = replace_self(ty, self_ty);
        Some(quote_spanned! {ty.span()=>
            #(#cfgs)*
            #private::assert_alarm_argument::<#replaced>();
        })
    });
    wrap_in_const(quote! {
        #[automatically_derived]
        impl #private::Handlers for #self_ty {
            #signatures
            #after_load
            #alarm
        }

        #object_check
        #(#checks)*
        #(#alarm_checks)*
    })
}

/// `Handlers::after_load`, calling the user's hook and converting its result.
fn after_load(set: &HandlerSet, hook: &AfterLoad, private: &TokenStream) -> TokenStream {
    let self_ty = &set.self_ty;
    let AfterLoad {
        method,
        is_async,
        takes_ctx,
        output,
        cfgs,
    } = hook;
    let ctx = takes_ctx.then(|| quote!(__ctx));
    let awaited = is_async.then(|| quote!(.await));
    let call = quote!(<#self_ty>::#method(self, #ctx) #awaited);
    // Spanned at the hook's return type: a type that is neither `()` nor `Result<(), E>` is
    // reported there.
    let into_result = quote_spanned! {output.span()=>
        <#output as #private::HookResult>::into_hook_result(#call)
    };
    quote! {
        #(#cfgs)*
        fn after_load<'__a>(
            &'__a mut self,
            __ctx: &'__a #private::Context,
        ) -> #private::BoxFuture<'__a, ::core::result::Result<(), #private::BoxError>> {
            ::std::boxed::Box::pin(async move {
                #into_result
            })
        }
    }
}

/// `Handlers::alarm`: runs the `#[alarm]` method named `__name`, converting its result.
fn alarm(set: &HandlerSet, private: &TokenStream) -> TokenStream {
    let self_ty = &set.self_ty;
    let arms = set.alarms.iter().map(|alarm| {
        let AlarmHandler {
            method,
            name,
            is_async,
            takes_ctx,
            takes_attempt,
            args,
            output,
            cfgs,
            ..
        } = alarm;
        let ctx = takes_ctx.then(|| quote!(__ctx,));
        let attempt = takes_attempt.then(|| quote!(__attempt,));
        let awaited = is_async.then(|| quote!(.await));
        // The stored argument is decoded before the handler runs; a misfit fails the attempt.
        let (decode, passed) = match args {
            Some(ty) => {
                let ty = replace_self(ty, self_ty);
                let decode = quote! {
                    let __args = match #private::alarm_args::<#ty>(#name, __payload) {
                        ::core::result::Result::Ok(args) => args,
                        ::core::result::Result::Err(error) => {
                            return ::core::option::Option::Some(#private::AlarmRun::Done(
                                ::core::result::Result::Err(error),
                            ));
                        }
                    };
                };
                (Some(decode), Some(quote!(__args,)))
            }
            None => (None, None),
        };
        let call = quote!(<#self_ty>::#method(self, #ctx #passed #attempt) #awaited);
        // Spanned at the return type, as for the after-load hook.
        let into_result = quote_spanned! {output.span()=>
            <#output as #private::HookResult>::into_hook_result(#call)
        };
        // A synchronous handler runs here, without a future.
        let run = if *is_async {
            quote! {
                #private::AlarmRun::Running(::std::boxed::Box::pin(async move {
                    #into_result
                }))
            }
        } else {
            quote!(#private::AlarmRun::Done(#into_result))
        };
        quote! {
            #(#cfgs)*
            #name => {
                #decode
                ::core::option::Option::Some(#run)
            }
        }
    });
    quote! {
        fn alarm<'__a>(
            &'__a mut self,
            __ctx: &'__a #private::Context,
            __name: &::core::primitive::str,
            __attempt: ::core::primitive::u32,
            __payload: ::core::option::Option<&[::core::primitive::u8]>,
        ) -> ::core::option::Option<#private::AlarmRun<'__a>> {
            match __name {
                #(#arms)*
                _ => ::core::option::Option::None,
            }
        }
    }
}

/// `assert_argument::<T>()` for every argument type, `assert_output` / `assert_error` for the
/// result, each spanned at the user's type.
fn type_checks(set: &HandlerSet, handler: &Handler, private: &TokenStream) -> TokenStream {
    let cfgs = &handler.cfgs;
    let check = |function: &str, ty: &syn::Type| {
        let function = quote::format_ident!("{}", function);
        let replaced = replace_self(ty, &set.self_ty);
        quote_spanned! {ty.span()=>
            #(#cfgs)*
            #private::#function::<#replaced>();
        }
    };
    let mut checks: Vec<TokenStream> = handler
        .args
        .iter()
        .map(|argument| check("assert_argument", &argument.ty))
        .collect();
    match &handler.output {
        Output::Unit => {}
        Output::Value(ty) => checks.push(check("assert_output", ty)),
        Output::Fallible { ok, err } => {
            checks.push(check("assert_output", ok));
            checks.push(match err {
                ErrorType::Written(err) => check("assert_error", err),
                ErrorType::OfAlias(result) => check("assert_result_alias", result),
            });
        }
    }
    quote!(#(#checks)*)
}
