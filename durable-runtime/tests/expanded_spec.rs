// Hand-written expansion of:
//
// #[durable_object(hibernate_after = "5m")]
// pub struct Counter {
//     #[field(default = 10)]
//     count: i64,
//     label: String,
// }
//
// #[durable_object]
// impl Counter {
//     #[after_load]
//     fn loaded(&mut self, ctx: &Context) { self.label = ctx.id().to_owned(); }
//     #[handler]
//     fn handle_increment(&mut self, by: i64) -> i64 { self.count += by; self.count }
//     #[handler]
//     async fn handle_get(&self) -> i64 { self.count }
//     #[handler]
//     fn handle_checked(&mut self, ctx: &Context, by: i64) -> Result<i64, TooBig> { .. }
// }

#[derive(Debug, PartialEq)]
pub struct TooBig(i64);
impl std::fmt::Display for TooBig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "too big: {}", self.0)
    }
}

// ---- struct half ----
#[derive(
    ::durable_runtime::__private::serde::Serialize, ::durable_runtime::__private::serde::Deserialize,
)]
#[serde(crate = "::durable_runtime::__private::serde", default)]
pub struct Counter {
    count: i64,
    label: String,
}

const _: () = {
    #[automatically_derived]
    impl ::core::default::Default for Counter {
        fn default() -> Self {
            Self {
                count: 10,
                label: <String as ::durable_runtime::__private::FieldDefault>::field_default(),
            }
        }
    }
    #[automatically_derived]
    impl ::durable_runtime::__private::DurableObject for Counter {
        const TYPE_NAME: &'static str = "Counter";
        fn options() -> ::durable_runtime::__private::ObjectOptions {
            ::durable_runtime::__private::options()
                .with_hibernate_after(::durable_runtime::__private::nanos(300_000_000_000))
        }
    }
};

// ---- impl half ----
impl Counter {
    fn loaded(&mut self, ctx: &::durable_runtime::Context) {
        self.label = ctx.id().to_owned();
    }
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }
    async fn handle_get(&self) -> i64 {
        self.count
    }
    fn handle_checked(
        &mut self,
        _ctx: &::durable_runtime::Context,
        by: i64,
    ) -> Result<i64, TooBig> {
        self.count += by;
        if self.count > 100 {
            return Err(TooBig(self.count));
        }
        Ok(self.count)
    }
}

const _: () = {
    #[automatically_derived]
    impl ::durable_runtime::__private::Handlers for Counter {
        fn after_load<'__a>(
            &'__a mut self,
            __ctx: &'__a ::durable_runtime::__private::Context,
        ) -> ::durable_runtime::__private::BoxFuture<
            '__a,
            ::core::result::Result<(), ::durable_runtime::__private::BoxError>,
        > {
            ::std::boxed::Box::pin(async move {
                ::durable_runtime::__private::HookResult::into_hook_result(Counter::loaded(
                    self, __ctx,
                ))
            })
        }
    }
};

impl Counter {
    pub async fn increment(
        __rt: &::durable_runtime::__private::Runtime,
        __id: impl ::core::convert::AsRef<str>,
        by: i64,
    ) -> ::core::result::Result<i64, ::durable_runtime::__private::Error> {
        ::durable_runtime::__private::call::<Counter, _, ::core::convert::Infallible, _>(
            __rt,
            __id.as_ref(),
            ::durable_runtime::__private::Access::Write,
            "increment",
            move |__this, __ctx| {
                let _ = __ctx;
                ::std::boxed::Box::pin(async move {
                    ::core::result::Result::Ok(__this.handle_increment(by))
                })
            },
        )
        .await
    }
    pub async fn get(
        __rt: &::durable_runtime::__private::Runtime,
        __id: impl ::core::convert::AsRef<str>,
    ) -> ::core::result::Result<i64, ::durable_runtime::__private::Error> {
        ::durable_runtime::__private::call::<Counter, _, ::core::convert::Infallible, _>(
            __rt,
            __id.as_ref(),
            ::durable_runtime::__private::Access::Read,
            "get",
            move |__this, __ctx| {
                let _ = __ctx;
                ::std::boxed::Box::pin(async move {
                    ::core::result::Result::Ok(__this.handle_get().await)
                })
            },
        )
        .await
    }
    pub async fn checked(
        __rt: &::durable_runtime::__private::Runtime,
        __id: impl ::core::convert::AsRef<str>,
        by: i64,
    ) -> ::core::result::Result<i64, ::durable_runtime::__private::Error<TooBig>> {
        ::durable_runtime::__private::call::<Counter, _, _, _>(
            __rt,
            __id.as_ref(),
            ::durable_runtime::__private::Access::Write,
            "checked",
            move |__this, __ctx| {
                ::std::boxed::Box::pin(async move { __this.handle_checked(__ctx, by) })
            },
        )
        .await
    }
}

#[tokio::test]
async fn hand_expansion_runs() {
    let rt = durable_runtime::Runtime::new(durable_runtime::MemoryStorage::new());
    assert_eq!(Counter::increment(&rt, "a", 5).await.unwrap(), 15);
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 15);
    assert!(matches!(
        Counter::checked(&rt, "a", 100).await,
        Err(durable_runtime::Error::Handler(TooBig(115)))
    ));
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 15);
}
