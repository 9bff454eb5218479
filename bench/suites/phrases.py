"""Sentence and question templates shared by all topics. Many phrasings of each move, so that
no scorer, prompt or heuristic can be tuned to one wording. Placeholders: {name}, {dept},
{area}, {title}, {item}, {amount}, {event}, {date}, {metric}, {value}, {task}, {gerund},
{subject}, {a}, {b}, {choice}, {proposal}, {old}, {new}, {np}."""

from __future__ import annotations

OPENINGS = (
    "Good morning, everyone. Today we are talking about {title}.",
    "Okay, let's get started. This meeting is about {title}.",
    "Hi all, thanks for joining. The goal today is to review {title}.",
    "Let's begin. On the agenda today is {title}.",
    "Hello everyone. I want to use this time to go through {title}.",
    "Right, I think we are all here. Let's talk about {title}.",
    "Thanks for coming. We have a lot to cover on {title}.",
    "Good afternoon. This is our weekly check in on {title}.",
)

INTROS = (
    "I am {name}.", "Hi, I'm {name} from {dept}.", "{name} here, from {dept}.", "This is {name} from {dept}.",
    "My name is {name} and I run {area}.", "Hello everyone, {name} speaking. I lead {area}.",
    "Hi all, I'm {name}, I work in {dept}.", "For those who don't know me, I'm {name} from {dept}.",
    "Hey, it's {name}. I look after {area}.", "I'm {name}, and I'm new on {area}.",
)
INTRO_ROUND = ("Let's do a quick round of introductions.", "Before we start, let's introduce ourselves.",
               "We have some new faces, so let's go around the room.")

ADDRESS_PROMPTS = (
    "{name}, can you give us an update?", "{name}, you're next.", "What about you, {name}?",
    "{name}, anything from your side?", "Over to you, {name}.", "{name}, where are we on this?",
    "{name}, can you walk us through it?", "{name}, what do you have for us?", "Let's hear from {name}.",
)
NUMBERS_PROMPTS = ("{name}, can you give us the numbers?", "{name}, how do the numbers look?",
                   "{name}, what did the quotes come back at?")
PLAIN_PROMPTS = ("What's the status?", "Who has the numbers?", "Any update on that?", "Who wants to go next?",
                 "Where do we stand?", "Can someone give us the latest?", "How are we doing there?")
THANKS_NAMED = ("Thanks, {name}.", "Thank you, {name}. That's helpful.", "Great, thanks {name}.",
                "Got it, thanks, {name}.", "Perfect, thank you, {name}.")
THANKS_PLAIN = ("Thank you.", "Great.", "Okay, good.", "Thanks, that's clear.", "Good to know.")
OTHERS_PROMPTS = ("What do the others think?", "Any other thoughts?")
AGREE = "I agree."  # when a speaker asked for an opinion has no filler left
OPINION_PROMPTS = ("{name}, what do you think?", "{name}, do you agree?", "Any thoughts, {name}?")

BACKCHANNELS = ("Yeah.", "Right.", "Okay.", "Mm-hm.", "Sure.", "Got it.", "I see.", "Uh-huh.", "True.")

AMOUNT = (
    "The {item} will cost {amount}.", "We expect the {item} to cost about {amount}.",
    "For the {item}, the quote came back at {amount}.", "The budget for the {item} is {amount}.",
    "I checked the numbers, and the {item} {comes} to {amount}.", "We set aside {amount} for the {item}.",
    "The {item} {is} going to be {amount} in total.", "Our estimate for the {item} is {amount}.",
    "We got a price for the {item}: {amount}.",
)
HOW_MUCH_Q = (
    "How much will the {item} cost?", "What's the price of the {item}?", "What budget did they give the {item}?",
    "How much money is set aside for the {item}?", "What is the cost of the {item}?",
    "How much {is} the {item} going to be?", "What did they say the {item} {costs}?",
)

EVENT = (
    "The {event} is on {date}.", "We scheduled the {event} for {date}.", "The {event} will take place on {date}.",
    "We have the {event} on {date}.", "Please note that the {event} is set for {date}.",
    "Just so everyone knows, the {event} happens on {date}.",
)
WHEN_Q = ("When is the {event}?", "On what date is the {event}?", "What day is the {event} scheduled for?",
          "When will the {event} take place?", "What is the date of the {event}?")

MOVE_OLD = ("The {event} was planned for {old}, but we are not ready.",
            "We had the {event} on {old}, and that is too early now.",
            "Originally the {event} was {old}. That date does not work anymore.")
MOVE_DECIDE = ("We decided to move the {event} to {new}.", "Let's move the {event} to {new}.",
               "The decision is to move the {event} to {new}.", "Okay, the {event} moves to {new}.")
DECIDED_MOVE_Q = ("What did they decide about the {event}?", "What was decided regarding the {event}?",
                  "What change did they make to the {event}?")
WHEN_NOW_Q = ("When is the {event} now?", "What is the new date for the {event}?",
              "When will the {event} happen after the change?")

METRIC = (
    "The {metric} is {value}.", "Right now the {metric} is at {value}.", "This month the {metric} came in at {value}.",
    "We measured a {metric} of {value}.", "Our {metric} is currently {value}.", "The latest {metric} is {value}.",
    "Looking at the dashboard, the {metric} is {value}.",
)
METRIC_PREVIOUS = (" Last month it was {old}.", " That is a change from {old} before.", " It used to be {old}.")
METRIC_Q = ("What is the current {metric}?", "What is the {metric} right now?", "What did they say the {metric} is?",
            "Where is the {metric} at the moment?", "What {metric} was reported this time?")

CHOICE_OPTIONS = ("For {subject}, we have two options: {a} or {b}.", "We need to pick {subject}. It's {a} or {b}.",
                  "On {subject}, it comes down to {a} versus {b}.")
CHOICE_VENDOR_OPTIONS = ("There are two offers for {subject}, one from {a} and one from {b}.",
                         "For {subject}, we talked to {a} and {b}.")
CHOICE_OPINION = ("{a} is cheaper, but {b} looks better to me.", "I prefer {b}. It worked well for us before.",
                  "{a} is fine, but {b} can start sooner.", "I would go with {b}, honestly.",
                  "{b} has the better reviews.")
CHOICE_DECIDE = ("Okay, let's go with {b}.", "We decided to go with {b} for {subject}.", "The decision is {b}.",
                 "Then it's settled: {b} for {subject}.", "Let's choose {b}.", "Fine, {b} it is.")
DECIDED_Q = ("What did they decide about {subject}?", "Which option was chosen for {subject}?",
             "What was decided regarding {subject}?", "What was the decision on {subject}?")

PROPOSE = ("Should we {proposal}?", "What do you think, should we {proposal}?", "I suggest we {proposal}.",
           "Maybe we should {proposal}.", "How about we {proposal}?")
ACCEPT = ("Yes, let's {proposal}.", "I agree, we should {proposal}.", "Good idea. Let's do that.",
          "Yes, I'm in favor. We will {proposal}.", "Sounds good to me, let's do it.")
REJECT = ("No, I don't think we should {proposal}. It is too expensive.", "Let's not {proposal} this time.",
          "No, we can't {proposal} right now.", "I would say no. We don't have time for that.",
          "No, let's leave that for now.")
YES_NO_Q = ("Did they agree to {proposal}?", "Are they going to {proposal}?", "Will the team {proposal}?",
            "Was it agreed to {proposal}?", "Did the group decide to {proposal}?")

SELF_ACTION = ("I will {task} by {date}.", "I can {task}. I'll have it done by {date}.",
               "Let me {task}. You will have it by {date}.", "On my side, I will {task} by {date}.",
               "I'm going to {task} before {date}.")
ASSIGN = ("{name}, can you {task} by {date}?", "{name}, could you please {task} by {date}?",
          "{name}, I'd like you to {task} by {date}.", "{name}, would you {task} by {date}?")
ASSIGN_REPLY = ("Sure, I will.", "Yes, I can do that.", "Okay, no problem.", "Sure, I'll have it ready by then.",
                "Yes, that works for me.")
VOLUNTEER_ASK = ("Who can {task}?", "Does anyone have time to {task}?", "We need someone to {task}.")
VOLUNTEER = ("I can do it. I will {task} by {date}.", "I'll do it. I can {task} by {date}.",
             "Me. I will {task} by {date}.")
WHO_WILL_Q = ("Who is going to {task}?", "Who's responsible for {gerund}?", "Which person will {task}?",
              "Who will {task}?", "Who agreed to {task}?", "Who took on {gerund}?")
DUE_Q = ("What is the deadline to {task}?", "By when does the team need to {task}?",
         "When is the deadline for {gerund}?", "By which date should someone {task}?")

NEXT_MEETING_Q = ("When is the next meeting?", "When will they meet again?", "What date is the next meeting?")
NEXT_MEETING = ("Let's meet again on {date}.", "Our next meeting is on {date}.", "We will meet again on {date}.")

WHO_SAID_Q = ("Who reported {np}?", "Who mentioned {np}?", "Which person talked about {np}?",
              "Who brought up {np}?", "Who gave {np}?")
WHO_PROPOSED_Q = ("Who suggested that they {proposal}?", "Who proposed to {proposal}?",
                  "Whose idea was it to {proposal}?")

ABSENT_AMOUNT_Q = ("How much will the {item} cost?", "What is the budget for the {item}?",
                   "What's the price of the {item}?", "How much {is} the {item} going to be?")
ABSENT_WHEN_Q = ("When is the {event}?", "What is the date of the {event}?")
ABSENT_WHO_Q = ("Who is going to {task}?", "Who is responsible for {gerund}?")
ABSENT_METRIC_Q = ("What is the {metric}?", "What did they say the {metric} is?")
# Figures never given for things the meeting does talk about (a date said, no price): a made-up answer
# would lift another line's amount.
FIGURE_NOT_SAID_EVENT_Q = ("How much will the {event} cost?", "What is the budget for the {event}?",
                           "How much are they spending on the {event}?")
FIGURE_NOT_SAID_TASK_Q = ("How much will it cost to {task}?", "What is the budget for {gerund}?",
                          "How much money is set aside for {gerund}?")

CLOSING_REPLIES = ("Thank you.", "Bye, everyone.", "Thanks, see you then.")
CLOSINGS = ("Thanks, everyone.", "Great, that's all for today.", "Okay, thank you all. Talk soon.",
            "Good meeting, everyone. Thanks.", "That's it from me. Thanks for your time.")
# Remarks a speaker can add to their own turn or say on their own; reactions only stand alone.
GENERIC_REMARKS = (
    "I think we are in good shape overall.", "Let's keep an eye on that over the next few weeks.",
    "It has been a busy month.", "We should write that down so we don't forget.",
    "I talked to a few people about this yesterday, and they felt the same way.",
    "It is going better than I expected, to be honest.", "I'm a bit worried about the timeline, but it should be fine.",
    "One more thing: we should share these notes with the rest of the team.",
    "We can come back to that later if needed.",
)
REACTIONS = (
    "That makes sense to me.", "I had the same question.", "I agree with that.", "That's a fair point.",
    "Good, that's one less thing to worry about.", "Let me think about that for a moment. Yes, I think that works.",
    "Interesting. I did not expect that.", "Okay, that sounds reasonable.",
)
