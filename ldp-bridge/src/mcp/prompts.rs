//! A delegate's skill templates as MCP prompts: one prompt per skill whose model prompt is a template, with one
//! argument, `input`, and `prompts/get` answering the user message the delegate would send its model for that input.
//! The template is rendered by the delegate's own code (the closure the server was given), never re-implemented here.

use std::sync::Arc;

use rmcp::model::{ErrorData, GetPromptResult, Prompt, PromptArgument, PromptMessage, Role};
use serde_json::Value;

/// The one argument of a skill prompt: the task input the template is filled with.
pub const INPUT_ARGUMENT: &str = "input";

/// Renders a template for one input.
pub type Render = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// One skill's prompt: its name (the skill's), a description, and how its template renders an input.
#[derive(Clone)]
pub struct SkillPrompt {
    name: String,
    description: String,
    render: Render,
}

impl std::fmt::Debug for SkillPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillPrompt").field("name", &self.name).finish_non_exhaustive()
    }
}

impl SkillPrompt {
    /// The prompt of skill `name`, rendered by `render` (the delegate's own template code).
    pub fn new(name: impl Into<String>, description: impl Into<String>, render: Render) -> Self {
        Self { name: name.into(), description: description.into(), render }
    }

    /// The skill's name, which is the prompt's.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The prompt as `prompts/list` shows it.
    pub(crate) fn listed(&self) -> Prompt {
        let input = PromptArgument::new(INPUT_ARGUMENT)
            .with_description("The task input the skill's template is filled with")
            .with_required(true);
        Prompt::new(&self.name, Some(&self.description), Some(vec![input]))
    }

    /// `prompts/get`: the user message for the `input` argument (a string; any other JSON value as its JSON text).
    pub(crate) fn get(&self, arguments: Option<&serde_json::Map<String, Value>>) -> Result<GetPromptResult, ErrorData> {
        let input = match arguments.and_then(|a| a.get(INPUT_ARGUMENT)) {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => {
                return Err(ErrorData::invalid_params(
                    format!("prompt {:?} needs the argument {INPUT_ARGUMENT:?}", self.name),
                    None,
                ));
            }
        };
        let message = PromptMessage::new_text(Role::User, (self.render)(&input));
        Ok(GetPromptResult::new(vec![message]).with_description(self.description.clone()))
    }
}

/// The prompt named `name` among `prompts`, or MCP's invalid-params error.
pub(crate) fn find<'a>(prompts: &'a [SkillPrompt], name: &str) -> Result<&'a SkillPrompt, ErrorData> {
    prompts
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ErrorData::invalid_params(format!("unknown prompt {name:?}"), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_renders_its_input_with_the_given_code() {
        let prompt = SkillPrompt::new("sum", "Summarise", Arc::new(|input: &str| format!("[{input}]")));
        assert_eq!(prompt.listed().arguments.unwrap()[0].required, Some(true));
        let args = serde_json::json!({"input": "abc"});
        let got = prompt.get(args.as_object()).unwrap();
        assert_eq!(serde_json::to_value(&got.messages[0]).unwrap()["content"]["text"], "[abc]");
        let data = serde_json::json!({"input": {"n": 1}});
        let got = prompt.get(data.as_object()).unwrap();
        assert_eq!(serde_json::to_value(&got.messages[0]).unwrap()["content"]["text"], "[{\"n\":1}]");
        assert!(prompt.get(None).is_err());
        assert!(find(&[prompt], "other").is_err());
    }
}
