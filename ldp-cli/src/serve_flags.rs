//! The flags of `ldp serve` for what answers tasks (`--backend` and the model's settings) and for the bridges
//! (`--mcp`, `--a2a`). They only describe the command line: [`crate::serve::FLAGS`] maps each onto its key.

use std::path::PathBuf;

/// The LLM flags of `ldp serve`. Without --backend, `ldp serve` serves the echo delegate of the reference SDKs.
#[derive(Debug, clap::Args)]
pub struct LlmArgs {
    /// What answers tasks: `openai` (Chat Completions: OpenAI, vLLM, llama.cpp's server, Ollama, LM Studio),
    /// `anthropic`, `echo` (the LLM path without a model), `local` (a GGUF file in process), `mcp` (an MCP server's
    /// tools) or `a2a` (an A2A agent's skills) [default: the echo delegate of the reference SDKs].
    #[arg(long, value_name = "KIND", value_parser = ["openai", "anthropic", "echo", "local", "mcp", "a2a"])]
    pub backend: Option<String>,
    /// The provider's base URL [default: `https://api.openai.com/v1` (openai: with the API version, as OpenAI's
    /// SDKs take it), `https://api.anthropic.com` (anthropic)].
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The model name sent to the provider; it is the card's model_version. With `--backend local`, the GGUF
    /// file to run.
    #[arg(long, value_name = "NAME|FILE")]
    pub model: Option<String>,
    /// The environment variable holding the API key (never printed) [default: OPENAI_API_KEY or ANTHROPIC_API_KEY
    /// when set; none for a local server].
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// A file whose text is the system prompt.
    #[arg(long, value_name = "FILE")]
    pub system_prompt: Option<PathBuf>,
    /// A skill (repeatable) [default: `chat`]: NAME passes the input as it is; NAME=FILE uses FILE as a prompt
    /// template where `{{input}}` stands for the input.
    #[arg(long = "skill", value_name = "NAME[=TEMPLATE_FILE]")]
    pub skills: Vec<String>,
    /// The model's context window, in tokens, for the identity card [default: 8192 openai, 200000 anthropic,
    /// 4096 echo].
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<u64>,
    /// The most tokens an answer may have (a contract's budget may lower it); anthropic requires one [default:
    /// none for openai, 1024 for anthropic].
    #[arg(long, value_name = "TOKENS")]
    pub max_tokens: Option<u64>,
    /// Ask for whole answers instead of streams (budgets are then checked after the answer, not during it).
    #[arg(long)]
    pub no_stream: bool,
    /// A JSON price table, `{"model": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}`, that gives `cost_usd`.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Longest wait for the provider (to a whole answer, or to a stream's first byte, and between its pieces).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub llm_timeout: u64,
    /// Retries after a provider 5xx, timeout or connection failure.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub llm_retries: u32,
    /// `--backend local`: sample at this temperature instead of always taking the most likely token.
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// `--backend local`: nucleus sampling cut-off in (0, 1] (with --temperature).
    #[arg(long, value_name = "P")]
    pub top_p: Option<f64>,
    /// `--backend local`: the sampling seed (with --temperature): the same seed, the same answers.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// `--backend local`: divide the probability of tokens already in the answer (1.0: off).
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// `--backend local`: answers generated at once (llama: sequences decoded together, each keeping its session's
    /// cache); more tasks wait their turn.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_concurrent: usize,
    /// `--backend local`: the runtime: `llama` (llama.cpp in process: batched sessions, tools and response schemas
    /// by constrained decoding) or `candle` (pure Rust) [default: llama when built in, else candle].
    #[arg(long, value_name = "ENGINE", value_parser = ["llama", "candle"])]
    pub engine: Option<String>,
    /// `--backend local --engine llama`: threads of the model's arithmetic [default: the machine's cores but one, at least one].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// `--backend local`: the arithmetic of the model's matrix products: `f32` (weights widened at load: exact, 4
    /// bytes per parameter) or `quantized` (as the file stores them: least memory).
    #[arg(long, value_name = "PRECISION", default_value = "f32", value_parser = ["f32", "quantized"])]
    pub precision: String,
    /// Another delegate (repeatable) whose skills the model may call as tools: each call a sub-task routed by
    /// verified quality, cost and trust, under a child contract of the task's.
    #[arg(long = "delegate", value_name = "URL")]
    pub delegates: Vec<String>,
    /// With --delegate: rounds of tool calls before the model must answer.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub tool_rounds: u32,
    /// With --delegate: an attestation issuer whose signed quality claims count when routing among them
    /// (repeatable): its pinned key, and optionally its base URL to fetch its key set and revocation list from
    /// and keep them fresh.
    #[arg(long = "delegate-issuer", value_name = "ISSUER_ID=KEY_ID=PUBLIC_HEX[@URL]")]
    pub delegate_issuers: Vec<String>,
    /// With --delegate: run this command (`sh -c`) for the bearer token sent to the delegates.
    #[arg(long, value_name = "COMMAND")]
    pub delegate_token_command: Option<String>,
    /// With --delegate: get their bearer token from this OAuth 2.0 token endpoint by client credentials.
    #[arg(long, value_name = "URL")]
    pub delegate_oauth_token_url: Option<String>,
    /// The OAuth client id for --delegate-oauth-token-url.
    #[arg(long, value_name = "ID")]
    pub delegate_oauth_client_id: Option<String>,
    /// The environment variable holding that client's secret [default: LDP_OAUTH_CLIENT_SECRET].
    #[arg(long, value_name = "VAR")]
    pub delegate_oauth_client_secret_env: Option<String>,
    /// A scope to ask for with --delegate-oauth-token-url (repeatable).
    #[arg(long = "delegate-oauth-scope", value_name = "SCOPE", value_delimiter = ',')]
    pub delegate_oauth_scopes: Vec<String>,
    /// The resource (audience) to ask a token for with --delegate-oauth-token-url.
    #[arg(long, value_name = "URL")]
    pub delegate_oauth_audience: Option<String>,
}

/// The flags of `ldp serve --mcp`: MCP's Streamable HTTP transport at `/mcp`, behind the same authentication, body
/// limit and rate limit as the LDP routes.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Also serve MCP at /mcp: each capability a tool; an MCP session gets an LDP session; tools/call runs a task.
    #[arg(long)]
    pub mcp: bool,
    /// With --backend mcp: the MCP server to start, `PROGRAM ARG...` split on whitespace; it speaks MCP on its
    /// standard input and output, and its tools are the skills.
    #[arg(long, value_name = "COMMAND")]
    pub mcp_command: Option<String>,
    /// With --backend mcp: the URL of an MCP server speaking Streamable HTTP (`http://HOST:PORT/mcp`); its tools are
    /// the skills.
    #[arg(long, value_name = "URL")]
    pub mcp_url: Option<String>,
    /// With --mcp-url: the bearer token sent to that server.
    #[arg(long, value_name = "TOKEN")]
    pub mcp_token: Option<String>,
    /// MCP sessions open at once; an initialize beyond it is refused.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub mcp_max_sessions: usize,
    /// MCP tool calls in flight, all sessions together; beyond it a call fails with CAPACITY_EXCEEDED.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub mcp_max_calls: usize,
    /// MCP tool calls in flight in one MCP session.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub mcp_max_calls_per_session: usize,
    /// An MCP session without a request for this long is closed, with its LDP session, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub mcp_session_idle: u64,
    /// A Host header value /mcp accepts besides the loopback names and the --bind host (repeatable; DNS-rebinding
    /// protection); `*` accepts any.
    #[arg(long = "mcp-allowed-host", value_name = "HOST")]
    pub mcp_allowed_hosts: Vec<String>,
}

/// The flags of `ldp serve --a2a` (A2A's Agent Card at `/.well-known/agent-card.json`, public, and its JSON-RPC
/// binding at `/a2a`, behind the LDP routes' authentication, body limit and rate limit) and of `--backend a2a`.
#[derive(Debug, clap::Args)]
pub struct A2aArgs {
    /// Also serve A2A: the Agent Card at /.well-known/agent-card.json and JSON-RPC (SendMessage,
    /// SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, push notification configs; the 0.3
    /// names of the first four too) at /a2a; an A2A contextId gets an LDP session.
    #[arg(long)]
    pub a2a: bool,
    /// With --backend a2a: the A2A agent's base URL (its card at /.well-known/agent-card.json), or its card's URL.
    #[arg(long, value_name = "URL")]
    pub a2a_url: Option<String>,
    /// With --backend a2a: a bearer token to send to the agent (never printed).
    #[arg(long, value_name = "TOKEN", env = "LDP_A2A_TOKEN")]
    pub a2a_token: Option<String>,
    /// A2A contexts (LDP sessions) held at once; when full the least recently used idle one is closed.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub a2a_max_contexts: usize,
    /// A2A tasks held at once, running or ended (ended ones stay readable by GetTask for --a2a-task-ttl).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub a2a_max_tasks: usize,
    /// A2A tasks running at once; beyond it a message is refused with CAPACITY_EXCEEDED.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub a2a_max_running: usize,
    /// An A2A context without a message for this long is closed, with its LDP session, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub a2a_context_idle: u64,
    /// How long an ended A2A task stays readable by GetTask, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub a2a_task_ttl: u64,
    /// Largest A2A request body, in bytes [default: --max-body].
    #[arg(long, value_name = "BYTES")]
    pub a2a_max_body: Option<usize>,
    /// Refuse push notification configs (webhooks); the card then says pushNotifications: false.
    #[arg(long)]
    pub a2a_no_push: bool,
    /// Deliver push notifications to loopback, private and link-local addresses too (closed networks, tests).
    #[arg(long)]
    pub a2a_push_allow_private: bool,
    /// A webhook host exempt from the non-public address rule (repeatable), e.g. one internal receiver.
    #[arg(long = "a2a-push-allowed-host", value_name = "HOST")]
    pub a2a_push_allowed_hosts: Vec<String>,
    /// Attempts to deliver one push notification (the first and the retries, backoff doubling from 0.5 s).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub a2a_push_attempts: u32,
    /// Longest one push notification attempt may take, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub a2a_push_timeout: u64,
}

/// The JWT and OAuth flags of `ldp serve`: access tokens of an identity provider beside `--token`, and the server
/// as an OAuth protected resource (docs/oauth.md).
#[derive(Debug, clap::Args)]
pub struct OauthArgs {
    /// Accept JWT access tokens of this issuer (`iss`), an http(s) URL; keys from its OIDC discovery document
    /// unless --jwt-jwks-url is given. Needs --jwt-audience.
    #[arg(long, value_name = "URL")]
    pub jwt_issuer: Option<String>,
    /// The issuer's JWK Set URL [default: the discovery document's `jwks_uri`].
    #[arg(long, value_name = "URL")]
    pub jwt_jwks_url: Option<String>,
    /// An audience accepted in `aud` (repeatable; at least one with --jwt-issuer).
    #[arg(long = "jwt-audience", value_name = "AUD", value_delimiter = ',')]
    pub jwt_audiences: Vec<String>,
    /// An algorithm accepted (repeatable) [default: RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA].
    #[arg(long = "jwt-algorithm", value_name = "ALG", value_delimiter = ',')]
    pub jwt_algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds [default: 60].
    #[arg(long, value_name = "SECS")]
    pub jwt_leeway: Option<u64>,
    /// The claim naming the principal [default: `sub`].
    #[arg(long, value_name = "CLAIM")]
    pub jwt_principal_claim: Option<String>,
    /// The trust domain of token holders [default: --trust-domain].
    #[arg(long, value_name = "NAME")]
    pub jwt_trust_domain: Option<String>,
    /// A claim holding the holder's trust domain instead.
    #[arg(long, value_name = "CLAIM")]
    pub jwt_trust_domain_claim: Option<String>,
    /// A claim holding the holder's delegate id (e.g. `client_id`).
    #[arg(long, value_name = "CLAIM")]
    pub jwt_delegate_id_claim: Option<String>,
    /// A scope every token must grant (repeatable).
    #[arg(long = "jwt-required-scope", value_name = "SCOPE", value_delimiter = ',')]
    pub jwt_required_scopes: Vec<String>,
    /// The resource identifier published in the OAuth metadata: the server's public base URL [default: from each
    /// request's Host header].
    #[arg(long, value_name = "URL")]
    pub oauth_resource: Option<String>,
    /// An authorization server named in the metadata (repeatable) [default: --jwt-issuer].
    #[arg(long = "oauth-authorization-server", value_name = "URL")]
    pub oauth_authorization_servers: Vec<String>,
    /// Scopes a skill requires, `SKILL=SCOPE[ SCOPE...]` (repeatable).
    #[arg(long = "skill-scope", value_name = "SKILL=SCOPES")]
    pub skill_scopes: Vec<String>,
    /// Scopes an endpoint requires, `PATH=SCOPE[ SCOPE...]` (repeatable), e.g. `/mcp=mcp:tools`.
    #[arg(long = "endpoint-scope", value_name = "PATH=SCOPES")]
    pub endpoint_scopes: Vec<String>,
}
