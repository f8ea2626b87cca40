//! [`LlmDelegate`]: an LDP delegate whose skills are prompts to a model.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate, TaskContext};
use ldp_session::{DelegatedHop, TaskOutput, TaskRequest};
use ldp_types::{Capability, DelegateId, FailurePolicy, IdentityCard, LdpError, PayloadMode, codes};
use serde_json::Value;

use crate::backend::{ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmBackend, StreamControl, Usage};
use crate::price::PriceTable;
use crate::tools::{Spent, ToolLoopLimits, ToolOutcome, ToolRun, Toolbox, child_contract, result_text};

/// A skill's prompt: text in which `{{input}}` stands for the task's input. A template without the placeholder
/// gets the input after it, on a line of its own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PromptTemplate(Option<String>);

impl PromptTemplate {
    /// The placeholder replaced by the task's input.
    pub const PLACEHOLDER: &'static str = "{{input}}";

    /// The input as it is, with no template.
    pub fn identity() -> Self {
        Self(None)
    }

    /// A template from its text.
    pub fn new(text: impl Into<String>) -> Self {
        Self(Some(text.into()))
    }

    /// The user message for `input`.
    pub fn render(&self, input: &str) -> String {
        match &self.0 {
            None => input.to_owned(),
            Some(t) if t.contains(Self::PLACEHOLDER) => t.replace(Self::PLACEHOLDER, input),
            Some(t) => format!("{}\n{input}", t.trim_end()),
        }
    }
}

/// A delegate that answers each task with a model: the task input (through the skill's [`PromptTemplate`]) is the
/// user message, after the system prompt and the session's earlier turns (RFC 5.3 session context, from the task
/// context's history); the output is the model's text, streamed to the initiator as partial output (TASK_UPDATE)
/// while it is generated. A cancelled task stops the provider's request.
///
/// Provenance comes from the provider's answer: `tokens_used` from its usage (input plus output), `cost_usd` from
/// the [`PriceTable`] for the model that answered; confidence stays unset. A contract's `budget.max_tokens`
/// becomes the provider's `max_tokens`; while a streamed answer arrives its usage is checked against the budget
/// (tokens, and cost when the model has a price), and a budget that runs out stops the generation. Under
/// `fail_closed` a budget exceeded (or an answer the budget cut short) fails the task `CONTRACT_VIOLATED` with the
/// text so far as `partial_output`, through the responder's one failure path; under `fail_open` the cut answer is
/// the result.
///
/// With a [`Toolbox`] ([`LlmDelegate::with_toolbox`]) the model may call other delegates: each call runs as a
/// sub-task under a child contract (the budget left, the depth minus one, the parent's failure policy), its answer
/// goes back to the model, and the loop ends with the model's answer or at a bound ([`ToolLoopLimits`], the
/// budget, the depth), each a typed error with the text so far. The result's usage sums the model's and the
/// sub-tasks'; each sub-task becomes a lineage entry with the facts of its hop (skill, confidence, tokens, cost,
/// latency, verification status). At depth 0 no tools are offered.
#[derive(Clone)]
pub struct LlmDelegate {
    backend: Arc<dyn LlmBackend>,
    system: Option<String>,
    skills: BTreeMap<String, PromptTemplate>,
    prices: PriceTable,
    stream: bool,
    max_tokens: Option<u64>,
    toolbox: Option<Arc<dyn Toolbox>>,
    tool_limits: ToolLoopLimits,
}

impl std::fmt::Debug for LlmDelegate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmDelegate")
            .field("backend", &self.backend.info())
            .field("skills", &self.skills.keys().collect::<Vec<_>>())
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl LlmDelegate {
    /// A delegate over `backend` with one skill, `chat`, that passes the input as it is; answers are streamed.
    pub fn new(backend: Arc<dyn LlmBackend>) -> Self {
        let skills = BTreeMap::from([("chat".to_owned(), PromptTemplate::identity())]);
        Self {
            backend,
            system: None,
            skills,
            prices: PriceTable::new(),
            stream: true,
            max_tokens: None,
            toolbox: None,
            tool_limits: ToolLoopLimits::default(),
        }
    }

    /// Lets the model call the tools of `toolbox` (other delegates), within `limits` and the task's contract.
    #[must_use]
    pub fn with_toolbox(mut self, toolbox: Arc<dyn Toolbox>, limits: ToolLoopLimits) -> Self {
        self.toolbox = Some(toolbox);
        self.tool_limits = limits;
        self
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn with_system_prompt(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Replaces the skills with `skills` (name and template each).
    #[must_use]
    pub fn with_skills(mut self, skills: impl IntoIterator<Item = (String, PromptTemplate)>) -> Self {
        self.skills = skills.into_iter().collect();
        self
    }

    /// Sets the price table that gives `cost_usd`.
    #[must_use]
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// Streams answers (`true`, the default: budgets are checked while the model generates) or asks for them
    /// whole.
    #[must_use]
    pub fn with_streaming(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// The most tokens any answer may have, whatever the contract; a contract's budget may lower it.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u64) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The `max_tokens` of one answer: the delegate's own bound, lowered by what the budget has left.
    fn answer_cap(&self, budget_tokens: Option<u64>) -> Option<u64> {
        match (self.max_tokens, budget_tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The skills served, for the identity card.
    pub fn skills(&self) -> impl Iterator<Item = &str> {
        self.skills.keys().map(String::as_str)
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LlmBackend> {
        &self.backend
    }

    /// The request for `input` on `skill` after `history` (earlier inputs and outputs, oldest first).
    pub fn request<'a>(
        &self,
        template: &PromptTemplate,
        history: impl IntoIterator<Item = (&'a str, &'a str)>,
        input: &str,
        budget_tokens: Option<u64>,
    ) -> ChatRequest {
        let mut messages = Vec::new();
        for (user, assistant) in history {
            messages.push(ChatMessage::user(user));
            messages.push(ChatMessage::assistant(assistant));
        }
        messages.push(ChatMessage::user(template.render(input)));
        let max_tokens = self.answer_cap(budget_tokens);
        ChatRequest { system: self.system.clone(), messages, max_tokens, ..ChatRequest::default() }
    }

    /// Calls the model for `request`, checking `budget` as the answer streams in. Returns the answer and whether
    /// the budget ran out.
    async fn call(
        &self,
        request: &ChatRequest,
        budget: Option<&ldp_types::Budget>,
        ctx: &TaskContext,
    ) -> Result<(ChatResponse, bool), LdpError> {
        let configured = self.backend.info().model;
        let over = |model: Option<&str>, usage: &Usage| -> bool {
            let Some(budget) = budget else { return false };
            let tokens = budget.max_tokens.is_some_and(|max| usage.total().unwrap_or(0) > max);
            let cost = budget
                .max_cost_usd
                .is_some_and(|max| self.prices.cost(model.unwrap_or(&configured), usage).is_some_and(|c| c > max));
            tokens || cost
        };
        if !self.stream {
            let answer = self.backend.complete(request).await?;
            let exceeded = over(answer.model.as_deref(), &answer.usage);
            return Ok((answer, exceeded));
        }
        let mut exceeded = false;
        let mut on_delta = |piece: &str, usage: &Usage| {
            if over(None, usage) {
                exceeded = true;
                StreamControl::Stop
            } else {
                // Each piece within budget reaches the initiator as partial output (TASK_UPDATE) as it arrives.
                ctx.partial(piece);
                StreamControl::Continue
            }
        };
        let answer = self.backend.stream(request, &mut on_delta).await?;
        let exceeded = exceeded || over(answer.model.as_deref(), &answer.usage);
        Ok((answer, exceeded))
    }

    /// The task's input as the user's text: a text-mode string as it is, anything else as its JSON text.
    fn input_text(task: &TaskRequest) -> String {
        task.input.as_string().map_or_else(|| task.input.json().to_owned(), std::borrow::Cow::into_owned)
    }

    /// An identity card for this delegate: the backend's provider as model family and its model as version, the
    /// given context window, one capability per skill, text payloads.
    pub fn card(&self, delegate_id: DelegateId, context_window: u64) -> IdentityCard {
        let info = self.backend.info();
        let mut card = IdentityCard::new(delegate_id, format!("LLM ({})", info.model), info.provider, info.model);
        card.description = Some("Answers each task with a language model; the input is the user message".into());
        card.context_window = context_window;
        for skill in self.skills.keys() {
            card.capabilities.push(Capability::new(skill.clone()).with_description("A prompt to the model"));
        }
        card.supported_payload_modes = vec![PayloadMode::Text];
        card
    }
}

#[async_trait]
impl Delegate for LlmDelegate {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let Some(template) = self.skills.get(&task.skill) else {
            return Err(LdpError::capability(codes::SKILL_NOT_FOUND, format!("no skill {:?}", task.skill)));
        };
        let budget = task.contract.as_ref().and_then(|c| c.policy.budget.as_ref());
        let policy = task.contract.as_ref().map_or(FailurePolicy::default(), |c| c.policy.failure_policy);
        let input = Self::input_text(&task);
        // The session's earlier turns become the chat history: each input as the user message its skill made of
        // it, each output as the assistant's; failed or cancelled turns (no output) are left out.
        let turns: Vec<(String, String)> = ctx
            .history()
            .iter()
            .filter_map(|turn| {
                let output = turn.output.as_ref()?;
                let output = output.as_string().map_or_else(|| output.json().to_owned(), std::borrow::Cow::into_owned);
                let input =
                    turn.input.as_string().map_or_else(|| turn.input.json().to_owned(), std::borrow::Cow::into_owned);
                let user = self.skills.get(&turn.skill).map_or_else(|| input.clone(), |t| t.render(&input));
                Some((user, output))
            })
            .collect();
        let history = turns.iter().map(|(u, a)| (u.as_str(), a.as_str()));
        let request = self.request(template, history, &input, budget.and_then(|b| b.max_tokens));
        if let Some(toolbox) = &self.toolbox {
            return self.run_tools(toolbox.as_ref(), &task, &ctx, request).await;
        }
        // A cancelled task (TASK_CANCEL, session close or expiry) stops the provider request at once: dropping the
        // call drops the request, which closes the provider's stream.
        let (answer, exceeded) = tokio::select! {
            out = self.call(&request, budget, &ctx) => out?,
            () = ctx.cancelled() => return Err(LdpError::runtime(codes::CANCELLED, "cancelled")),
        };
        // An answer the budget's max_tokens cut short ran out of budget too.
        let cut = budget.is_some_and(|b| b.max_tokens.is_some()) && answer.finish == FinishReason::Length;
        if (exceeded || cut) && policy == FailurePolicy::FailClosed {
            let used = answer.usage.total().map_or_else(|| "unknown".to_owned(), |t| t.to_string());
            let contract = task.contract.as_ref().map_or("", |c| c.contract_id.as_str());
            return Err(LdpError::policy(
                codes::CONTRACT_VIOLATED,
                format!("contract {contract} violated: the budget ran out ({used} tokens used); generation stopped"),
            )
            .with_partial_output(Value::String(answer.text)));
        }
        let model = answer.model.clone().unwrap_or_else(|| self.backend.info().model);
        let mut out = TaskOutput::new(answer.text.as_str());
        out.tokens_used = answer.usage.total();
        out.cost_usd = self.prices.cost(&model, &answer.usage);
        out.tokens_in = answer.usage.input_tokens;
        out.tokens_out = answer.usage.output_tokens;
        // The provenance's model_version (and a usage receipt's model) name the model that answered.
        out.model = Some(model);
        out.evidence.extend(answer.trimmed.map(trim_evidence));
        Ok(out)
    }
}

/// The provenance record of a conversation the backend trimmed: the answer was read without the session's oldest
/// turns, and whoever judges it should know.
pub(crate) fn trim_evidence(trimmed: crate::Trimmed) -> ldp_types::EvidenceRef {
    ldp_types::EvidenceRef {
        source: "ldp-llm".into(),
        kind: TRIM_EVIDENCE_KIND.into(),
        uri: None,
        summary: Some(format!(
            "the {} oldest messages of the conversation ({} tokens) were left out to fit the {}-token context window",
            trimmed.messages, trimmed.tokens, trimmed.context_window
        )),
    }
}

/// The evidence kind (provenance `evidence[].kind`) that says the session's history was trimmed for an answer.
pub const TRIM_EVIDENCE_KIND: &str = "context_trimmed";

impl LlmDelegate {
    /// The tool loop: the model answers or calls tools; each call runs as a sub-task and its answer goes back,
    /// until an answer or a bound.
    async fn run_tools(
        &self,
        toolbox: &dyn Toolbox,
        task: &TaskRequest,
        ctx: &TaskContext,
        mut request: ChatRequest,
    ) -> Result<TaskOutput, LdpError> {
        let contract = task.contract.as_ref();
        let budget = contract.and_then(|c| c.policy.budget);
        let policy = contract.map_or(FailurePolicy::default(), |c| c.policy.failure_policy);
        // At depth 0 the task may not delegate: the model is offered nothing to call.
        let may_delegate = contract.and_then(|c| c.policy.max_delegation_depth) != Some(0);
        let tools = if may_delegate { toolbox.tools() } else { Vec::new() };
        let offered: std::collections::HashSet<String> = tools.iter().map(|t| t.name.clone()).collect();
        request.tools = tools;
        let limits = self.tool_limits;
        let mut spent = Spent::default();
        let mut delegated: Vec<DelegatedHop> = Vec::new();
        let mut said = String::new();
        let mut usage = Usage::default();
        let bound = |code: &str, why: String, said: &str| {
            LdpError::policy(code, why).with_partial_output(Value::String(said.to_owned()))
        };
        for round in 0..=limits.max_rounds {
            let left = match &budget {
                Some(b) => Some(spent.left(b).ok_or_else(|| {
                    bound(codes::BUDGET_EXCEEDED, "the contract's budget ran out between tool rounds".into(), &said)
                })?),
                None => None,
            };
            request.max_tokens = self.answer_cap(left.as_ref().and_then(|b| b.max_tokens));
            let (answer, exceeded) = tokio::select! {
                out = self.call(&request, left.as_ref(), ctx) => out?,
                () = ctx.cancelled() => return Err(LdpError::runtime(codes::CANCELLED, "cancelled")),
            };
            let answered_by = answer.model.clone().unwrap_or_else(|| self.backend.info().model);
            spent.add(answer.usage.total(), self.prices.cost(&answered_by, &answer.usage));
            usage.input_tokens = Some(usage.input_tokens.unwrap_or(0) + answer.usage.input_tokens.unwrap_or(0));
            usage.output_tokens = Some(usage.output_tokens.unwrap_or(0) + answer.usage.output_tokens.unwrap_or(0));
            said.push_str(&answer.text);
            let cut = left.as_ref().is_some_and(|b| b.max_tokens.is_some()) && answer.finish == FinishReason::Length;
            if (exceeded || cut) && policy == FailurePolicy::FailClosed {
                let contract_id = contract.map_or("", |c| c.contract_id.as_str());
                return Err(bound(
                    codes::CONTRACT_VIOLATED,
                    format!("contract {contract_id} violated: the budget ran out ({} tokens used)", spent.tokens),
                    &said,
                ));
            }
            if answer.tool_calls.is_empty() || exceeded || cut {
                let mut out = TaskOutput::new(answer.text.as_str());
                out.tokens_used = Some(spent.tokens);
                out.cost_usd = spent.costed.then_some(spent.cost_usd);
                out.tokens_in = usage.input_tokens;
                out.tokens_out = usage.output_tokens;
                out.model = Some(answered_by);
                out.delegated = delegated;
                return Ok(out);
            }
            if round == limits.max_rounds {
                break;
            }
            let calls = answer.tool_calls;
            request.messages.push(ChatMessage::assistant_calls(answer.text, calls.clone()));
            for (n, call) in calls.iter().enumerate() {
                let started = std::time::Instant::now();
                let outcome = if n >= limits.max_calls_per_round {
                    Err(LdpError::policy(codes::BUDGET_EXCEEDED, "too many tool calls in one round; not run"))
                } else if !offered.contains(&call.name) {
                    Err(LdpError::capability(codes::SKILL_NOT_FOUND, format!("no tool named {:?}", call.name)))
                } else {
                    let left = match &budget {
                        Some(b) => spent
                            .left(b)
                            .map(Some)
                            .ok_or_else(|| LdpError::policy(codes::BUDGET_EXCEEDED, "no budget left for this call")),
                        None => Ok(None),
                    };
                    let arguments = call
                        .arguments_json()
                        .map_err(|e| LdpError::runtime(codes::MALFORMED_MESSAGE, e.to_string()).with_retryable(false));
                    match left.and_then(|left| Ok((arguments?, left))) {
                        Err(e) => Err(e),
                        Ok((arguments, left)) => self.run_call(toolbox, task, ctx, call, arguments, left).await,
                    }
                };
                if let Ok(out) = &outcome
                    && let Some(provenance) = &out.provenance
                {
                    spent.add(provenance.tokens_used, provenance.cost_usd);
                    // The hop as the lineage shows it: what its result reported, the skill, and the time it took
                    // here (routing and failover included).
                    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    let skill = out.skill.as_deref().unwrap_or(&call.name);
                    delegated.push(DelegatedHop::new(provenance.clone(), |e| {
                        e.with_skill(skill).with_latency_ms(latency_ms)
                    }));
                }
                request.messages.push(ChatMessage::tool_result(call.id.clone(), result_text(&outcome)));
            }
        }
        Err(bound(
            codes::BUDGET_EXCEEDED,
            format!("the model still called tools after {} rounds", limits.max_rounds),
            &said,
        ))
    }

    /// Runs one call as a sub-task, bounded by the contract's deadline or the loop's call timeout, and stopped
    /// when the parent is cancelled.
    async fn run_call(
        &self,
        toolbox: &dyn Toolbox,
        task: &TaskRequest,
        ctx: &TaskContext,
        call: &crate::ToolCall,
        arguments: Value,
        left: Option<ldp_types::Budget>,
    ) -> Result<ToolOutcome, LdpError> {
        let contract = child_contract(task, call, left)?;
        let run = ToolRun { tool: &call.name, arguments, contract, parent: task };
        tokio::select! {
            out = tokio::time::timeout(self.tool_limits.call_timeout, toolbox.run(run)) => out.unwrap_or_else(|_| {
                Err(LdpError::runtime(codes::TIMEOUT, format!("tool {} did not answer in time", call.name)))
            }),
            () = ctx.cancelled() => Err(LdpError::runtime(codes::CANCELLED, "cancelled")),
        }
    }
}
